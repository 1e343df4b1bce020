package mcpbody

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// maxJSONDepth is the nesting the go-sdk's decoder accepts (internal/json defaultMaxDepth);
// deeper bodies it refuses, and so do we, before anything runs.
const MaxDepth = 1000

// errStrict* name why a body is refused; the message goes back in the parse error.
var (
	errStrictEmpty    = errors.New("empty body")
	errStrictTrailing = errors.New("trailing bytes after the JSON value")
	errStrictDepth    = fmt.Errorf("nesting deeper than %d", MaxDepth)
)

type strictScanner struct {
	b []byte
	i int
}

func (s *strictScanner) errAt(what string) error {
	if s.i >= len(s.b) {
		return fmt.Errorf("unexpected end of JSON input (%s)", what)
	}
	return fmt.Errorf("invalid character %q at offset %d (%s)", s.b[s.i], s.i, what)
}

func (s *strictScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *strictScanner) value(depth int) error {
	if s.i >= len(s.b) {
		return s.errAt("value")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.errAt("value")
}

func (s *strictScanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.errAt("literal " + lit)
	}
	s.i += len(lit)
	return nil
}

// parseBody is the one parse of a request body in front of the SDK: the strict check and, in
// the same pass, the members of each top-level message and of its params object, as the raw
// values encoding/json would put in a map[string]json.RawMessage. A refused body has err set and
// no messages. A batch has one message per element (no members for an element that is not an
// object); a body that is neither object nor array has none.
//
// The strict check takes a body only if it is exactly one JSON value (RFC 8259) that every JSON
// decoder reads the same way, so that what the layers in front of the SDK check is what the SDK
// runs (CONTRACT semantics 7). The SDK's decoder (segmentio, through a json.Decoder) reads the
// first value and ignores whatever follows, keeps the last of duplicate keys (but ignores a later
// null), and replaces invalid UTF-8; encoding/json, which the layers here use, refuses trailing
// bytes. So a body is refused unless it is:
//   - one value with only JSON whitespace (space, tab, CR, LF) around it;
//   - free of duplicate object keys at any depth (compared after unescaping: a key decoders
//     disagree on is not worth a rule per level, and no honest client sends one);
//   - valid UTF-8 with no lone surrogate escape (decoders differ in what they make of them);
//   - nested no deeper than the SDK accepts.
func Parse(body []byte) *Body {
	pb := &Body{}
	s := strictScanner{b: body}
	if pb.Err = s.top(pb); pb.Err != nil {
		pb.Batch, pb.Msgs = false, nil
	}
	return pb
}

// top scans the whole body into pb.
func (s *strictScanner) top(pb *Body) error {
	s.ws()
	if s.i == len(s.b) {
		return errStrictEmpty
	}
	switch s.b[s.i] {
	case '{':
		pb.Msgs = []Message{{M: map[string]json.RawMessage{}}}
		if err := s.objectInto(1, pb.Msgs[0].M, &pb.Msgs[0].Params); err != nil {
			return err
		}
	case '[':
		pb.Batch = true
		if err := s.batch(pb); err != nil {
			return err
		}
	default:
		if err := s.value(0); err != nil {
			return err
		}
	}
	s.ws()
	if s.i != len(s.b) {
		return fmt.Errorf("%w (offset %d)", errStrictTrailing, s.i)
	}
	return nil
}

// batch scans a top-level array (s.array's rules), one message per element.
func (s *strictScanner) batch(pb *Body) error {
	return s.elements(func() error {
		var pm Message
		if s.i < len(s.b) && s.b[s.i] == '{' {
			pm.M = map[string]json.RawMessage{}
			if err := s.objectInto(2, pm.M, &pm.Params); err != nil {
				return err
			}
		} else if err := s.value(1); err != nil {
			return err
		}
		pb.Msgs = append(pb.Msgs, pm)
		return nil
	})
}

func (s *strictScanner) object(depth int) error { return s.objectInto(depth, nil, nil) }

// objectInto scans an object at s.i; with m, its members go into m (raw values), and with
// params, the members of its "params" member when that is an object go into a new *params.
func (s *strictScanner) objectInto(depth int, m map[string]json.RawMessage, params *map[string]json.RawMessage) error {
	if depth > MaxDepth {
		return errStrictDepth
	}
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	// Keys seen so far: a short list is faster than a map for the few keys a message has.
	var seen []string
	var seenMap map[string]struct{}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.errAt("object key")
		}
		key, err := s.str()
		if err != nil {
			return err
		}
		dup := false
		if seenMap != nil {
			_, dup = seenMap[key]
			seenMap[key] = struct{}{}
		} else {
			for _, k := range seen {
				if k == key {
					dup = true
					break
				}
			}
			seen = append(seen, key)
			if len(seen) > 16 {
				seenMap = make(map[string]struct{}, 2*len(seen))
				for _, k := range seen {
					seenMap[k] = struct{}{}
				}
			}
		}
		if dup {
			return fmt.Errorf("duplicate key %q", key)
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.errAt("after object key")
		}
		s.i++
		s.ws()
		start := s.i
		if params != nil && key == "params" && s.i < len(s.b) && s.b[s.i] == '{' {
			pm := map[string]json.RawMessage{}
			if err := s.objectInto(depth+1, pm, nil); err != nil {
				return err
			}
			*params = pm
		} else if err := s.value(depth); err != nil {
			return err
		}
		if m != nil {
			m[key] = s.b[start:s.i]
		}
		if end, err := s.next('}', "object", "after object value"); end || err != nil {
			return err
		}
	}
}

func (s *strictScanner) array(depth int) error {
	if depth > MaxDepth {
		return errStrictDepth
	}
	return s.elements(func() error { return s.value(depth) })
}

// elements scans the array at s.i, each element with elem (called at the element's start).
func (s *strictScanner) elements(elem func() error) error {
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if err := elem(); err != nil {
			return err
		}
		if end, err := s.next(']', "array", "after array element"); end || err != nil {
			return err
		}
	}
}

// next scans the separator after an object member or array element: ',' (more follow) or
// closing (the end, true). in and after name the place in errors.
func (s *strictScanner) next(closing byte, in, after string) (end bool, err error) {
	s.ws()
	if s.i >= len(s.b) {
		return false, s.errAt(in)
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return false, nil
	case closing:
		s.i++
		return true, nil
	}
	return false, s.errAt(after)
}

// str scans a string at s.i and returns its decoded value.
func (s *strictScanner) str() (string, error) {
	start := s.i
	s.i++ // '"'
	escaped := false
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			raw := s.b[start:s.i]
			if !escaped {
				return string(raw[1 : len(raw)-1]), nil
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return "", fmt.Errorf("string at offset %d: %w", start, err)
			}
			return v, nil
		case c == '\\':
			escaped = true
			if err := s.escape(); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", s.errAt("control character in string")
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n <= 1 {
				return "", fmt.Errorf("invalid UTF-8 at offset %d", s.i)
			}
			s.i += n
		}
	}
	return "", s.errAt("string")
}

// escape scans one escape sequence at s.i (the backslash); a \u escape of a surrogate must be
// the first half of a pair followed by the second.
func (s *strictScanner) escape() error {
	s.i++
	if s.i >= len(s.b) {
		return s.errAt("escape")
	}
	switch s.b[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i++
		return nil
	case 'u':
		r, ok := s.hex4(s.i + 1)
		if !ok {
			return s.errAt("\\u escape")
		}
		s.i += 5
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("lone surrogate escape at offset %d", s.i-6)
		case r >= 0xD800 && r <= 0xDBFF:
			if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
				if r2, ok := s.hex4(s.i + 2); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
					s.i += 6
					return nil
				}
			}
			return fmt.Errorf("lone surrogate escape at offset %d", s.i-6)
		}
		return nil
	}
	return s.errAt("escape")
}

func (s *strictScanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

func (s *strictScanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *strictScanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return s.errAt("number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return s.errAt("number fraction")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return s.errAt("number exponent")
		}
	}
	return nil
}
