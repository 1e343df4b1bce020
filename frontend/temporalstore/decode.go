package temporalstore

import (
	"encoding/json"
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/jobgate/jobgate/activities/payloadcrypt"
	"github.com/jobgate/jobgate/frontend/wire"
)

// Decoding what Temporal returns (memo fields, keyword search attributes) for every job the
// store reads: a hot path of get_* and list_*, so clear JSON skips the converter chain.

func decodeKeyword(dc converter.DataConverter, sa *commonpb.SearchAttributes, name string) string {
	p := sa.GetIndexedFields()[name]
	if p == nil {
		return ""
	}
	var s string
	if err := fromPayload(dc, p, &s); err != nil {
		return ""
	}
	return s
}

func decodeMemo[T any](dc converter.DataConverter, m *commonpb.Memo, key string) (T, bool) {
	v, ok, _ := decodeMemoErr[T](dc, m, key)
	return v, ok
}

// decodeMemoErr is decodeMemo with the reason a present field did not decode.
func decodeMemoErr[T any](dc converter.DataConverter, m *commonpb.Memo, key string) (T, bool, error) {
	var v T
	p := m.GetFields()[key]
	if p == nil {
		return v, false, nil
	}
	if err := fromPayload(dc, p, &v); err != nil {
		return v, false, err
	}
	return v, true, nil
}

// forgotten reports whether err is a payload sealed under a data key the key store no longer
// holds: a forgotten tenant's (`jobgate tenant forget`), whose jobs are answered as unknown.
// (A key store that never held the key, another deployment's, reads the same: its jobs are
// not this deployment's to show.)
func forgotten(err error) bool { return errors.Is(err, payloadcrypt.ErrUnknownKey) }

// fromPayload is dc.FromPayload(p, ptr). With the default data converter, a json/plain payload
// (every memo field and keyword search attribute jobgate writes) is decoded here the way the
// default converter's JSON payload converter does it, json.Unmarshal of the data, without the
// converter chain's per-call lookups and copies; a plain JSON string (no escapes) straight from
// its bytes. Anything else — another encoding, another converter — goes through dc.
func fromPayload(dc converter.DataConverter, p *commonpb.Payload, ptr any) error {
	if o, ok := dc.(PayloadOpener); ok {
		q, err := o.OpenPayload(p)
		if err != nil {
			return err
		}
		p, dc = q, defaultDC
	}
	if dc != defaultDC || string(p.GetMetadata()[converter.MetadataEncoding]) != converter.MetadataEncodingJSON {
		return dc.FromPayload(p, ptr)
	}
	data := p.GetData()
	if sp, ok := ptr.(*string); ok {
		if s, ok := wire.JSONString(data); ok {
			*sp = s
			return nil
		}
	}
	if err := json.Unmarshal(data, ptr); err != nil {
		return fmt.Errorf("%w: %v", converter.ErrUnableToDecode, err)
	}
	return nil
}

// PayloadOpener is a data converter that can undo its codec alone (payloadcrypt's opens sealed
// payloads, whose parent is the default converter): the store then decodes the clear JSON on
// its fast path, and caches by the sealed bytes, rather than take the converter chain for
// every memo field and search attribute of every job it reads.
type PayloadOpener interface {
	OpenPayload(*commonpb.Payload) (*commonpb.Payload, error)
}

// defaultDC is the default data converter (a package singleton), for fromPayload's fast path.
var defaultDC = converter.GetDefaultDataConverter()
