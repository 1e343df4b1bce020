package temporalstore

import (
	"encoding/json"
	"sync"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/frontend/jobstore"
	"github.com/jobgate/jobgate/workflows"
)

// Bounds of the decoded needs_input cache.
const (
	needsInputCacheMaxEntries = 4096
	needsInputCacheMaxBytes   = 8 << 20
	needsInputCacheMaxEntry   = 64 << 10
)

// needsInputCache holds decoded needs_input memos by their payload bytes. A job waiting for
// input is polled the whole time it waits, and its open request — the largest memo field, with
// the answer schema and the scope as nested maps — is the same bytes on every poll; decoding it
// is most of what reading the job allocates. The decoded value is a function of the bytes alone
// (json/plain under the default data converter, see fromPayload), the same for every caller and
// every job with those bytes: nothing about who asks or whether they may see the job.
//
// The *workflows.NeedsInput it returns is shared by every call that reads the same bytes: it
// and its maps are never modified (jobgate only reads an open request: to render it, to
// apply the policy, to seal an MRTR state).
type needsInputCache struct {
	mu    sync.Mutex
	m     map[string]decodedNeedsInput
	order []string // insertion order, oldest first
	bytes int
}

// decodedNeedsInput is an open request decoded, and its NeedsInputView encoded as JSON (the
// bytes json.Marshal gives for the view of ni: what every job view showing it contains).
type decodedNeedsInput struct {
	ni   *workflows.NeedsInput
	view []byte
}

func newNeedsInputCache() *needsInputCache {
	return &needsInputCache{m: make(map[string]decodedNeedsInput)}
}

func (c *needsInputCache) get(data []byte) (decodedNeedsInput, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[string(data)] // no copy: a map index by a converted []byte
	return d, ok
}

func (c *needsInputCache) put(data []byte, d decodedNeedsInput) {
	if len(data) > needsInputCacheMaxEntry {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[string(data)]; ok {
		return
	}
	for len(c.order) > 0 && (len(c.m) >= needsInputCacheMaxEntries || c.bytes+len(data) > needsInputCacheMaxBytes) {
		old := c.order[0]
		c.order[0] = ""
		c.order = c.order[1:]
		c.bytes -= len(old) + len(c.m[old].view)
		delete(c.m, old)
	}
	k := string(data)
	c.m[k] = d
	c.order = append(c.order, k)
	c.bytes += len(k) + len(d.view)
}

// decodeNeedsInput is decodeMemo[*workflows.NeedsInput](dc, m, workflows.MemoNeedsInput),
// served from c when the payload is json/plain under the default data converter;
// view is then the encoded NeedsInputView of the request (else nil).
func (c *needsInputCache) decode(dc converter.DataConverter, m *commonpb.Memo) (ni *workflows.NeedsInput, view []byte, ok bool) {
	p := m.GetFields()[workflows.MemoNeedsInput]
	// The cache key is the payload's bytes as stored: a sealed one's ciphertext names exactly
	// one plaintext, so a hit skips opening it too.
	key := p.GetData()
	if o, isOpener := dc.(PayloadOpener); isOpener && p != nil {
		if d, ok := c.get(key); ok {
			return d.ni, d.view, true
		}
		q, err := o.OpenPayload(p)
		if err != nil {
			return nil, nil, false
		}
		p, dc = q, defaultDC
	}
	if p == nil || dc != defaultDC || string(p.GetMetadata()[converter.MetadataEncoding]) != converter.MetadataEncodingJSON {
		if p == nil || dc != defaultDC {
			ni, ok = decodeMemo[*workflows.NeedsInput](dc, m, workflows.MemoNeedsInput)
			return ni, nil, ok
		}
		return ni, nil, fromPayload(dc, p, &ni) == nil
	}
	if d, ok := c.get(key); ok {
		return d.ni, d.view, true
	}
	if err := json.Unmarshal(p.GetData(), &ni); err != nil {
		return nil, nil, false
	}
	if ni != nil {
		var err error
		if view, err = json.Marshal(jobstore.NeedsInputViewOf(ni)); err != nil {
			view = nil
		} else {
			c.put(key, decodedNeedsInput{ni: ni, view: view})
		}
	}
	return ni, view, true
}
