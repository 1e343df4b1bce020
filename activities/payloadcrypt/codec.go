package payloadcrypt

import (
	"errors"
	"fmt"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/jobgate/jobgate/authz"
)

// ErrNoTenant is an encode with no jobgate workflow to name the tenant. It fails rather than
// writing the payload in clear: a payload Temporal keeps must be sealed.
var ErrNoTenant = errors.New("payloadcrypt: no tenant to encrypt for (no jobgate workflow ID in the serialization context)")

// TenantOf is the tenant a jobgate workflow ID begins with ("<tenant>/<kind>/<owner>/<key>",
// and its children's "<job ID>/..."), or "" for an ID that is not a jobgate one.
func TenantOf(workflowID string) string {
	t, _, ok := strings.Cut(workflowID, "/")
	if !ok || authz.ValidTenant(t) != nil {
		return ""
	}
	return t
}

// Codec is the payload codec: it seals payloads for its tenant and opens any tenant's. The
// SDK gives it the tenant through WithSerializationContext (the workflow ID of the payload's
// workflow, or of the activity's); a Codec without one opens but refuses to seal.
type Codec struct {
	keys   *Store
	tenant string
}

// NewCodec is the codec over keys, with no tenant until WithSerializationContext names one.
func NewCodec(keys *Store) *Codec { return &Codec{keys: keys} }

// ForTenant is c sealing for tenant (for callers outside the SDK: tests, tools).
func (c *Codec) ForTenant(tenant string) *Codec { return &Codec{keys: c.keys, tenant: tenant} }

var _ converter.PayloadCodecWithSerializationContext = (*Codec)(nil)

// WithSerializationContext takes the tenant from the workflow the payload belongs to. The SDK
// calls it for every workflow, activity, update, query, memo, heartbeat and failure payload.
func (c *Codec) WithSerializationContext(sc converter.SerializationContext) converter.PayloadCodec {
	var id string
	switch x := sc.(type) {
	case converter.WorkflowSerializationContext:
		id = x.WorkflowID
	case converter.ActivitySerializationContext:
		id = x.WorkflowID
	}
	t := TenantOf(id)
	if t == c.tenant {
		return c
	}
	return &Codec{keys: c.keys, tenant: t}
}

// Encode seals every payload under the tenant's newest key. A payload already sealed (a
// memo or detail passed back as it was read) is kept as it is.
func (c *Codec) Encode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	if len(ps) == 0 {
		// Nothing to seal. The SDK encodes a cancelled workflow's (empty) details without a
		// serialization context: refusing would fail every cancellation.
		return ps, nil
	}
	if c.tenant == "" {
		return ps, ErrNoTenant
	}
	keyID, aead, err := c.keys.Current(c.tenant)
	if err != nil {
		return ps, err
	}
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		if string(p.GetMetadata()[converter.MetadataEncoding]) == EncodingEncrypted {
			out[i] = p
			continue
		}
		if out[i], err = seal(aead, c.tenant, keyID, p); err != nil {
			return ps, err
		}
	}
	return out, nil
}

// Decode opens every sealed payload with the key its envelope names, and passes any other
// (written before encryption) through as it is.
func (c *Codec) Decode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		env, ok, err := parseEnvelope(p)
		if err != nil {
			return ps, err
		}
		if !ok {
			out[i] = p
			continue
		}
		aead, err := c.keys.Key(env.tenant, env.keyID)
		if err != nil {
			return ps, err
		}
		if out[i], err = open(aead, env); err != nil {
			return ps, err
		}
	}
	return out, nil
}

// NewDataConverter is the data converter of every jobgate client and worker: the SDK's
// default converter with the codec, so inputs, results, memos, heartbeats, updates and
// queries are sealed. Search attributes do not go through a data converter, so the routing
// keys stay readable to visibility queries.
func NewDataConverter(keys *Store) converter.DataConverter {
	c := NewCodec(keys)
	return &DataConverter{DataConverter: converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c), codec: c}
}

// DataConverter is NewDataConverter's: the SDK's codec data converter, which can also open a
// payload alone (OpenPayload), so a reader with a fast path for clear JSON (the frontend's
// memo decoding) keeps it for sealed payloads.
type DataConverter struct {
	converter.DataConverter
	codec *Codec
}

var _ converter.DataConverterWithSerializationContext = (*DataConverter)(nil)

// WithSerializationContext is the codec data converter's: the SDK seals with what it returns.
func (d *DataConverter) WithSerializationContext(sc converter.SerializationContext) converter.DataConverter {
	return converter.WithDataConverterSerializationContext(d.DataConverter, sc)
}

// OpenPayload is p opened (a clear payload as it is), for the default converter to decode.
func (d *DataConverter) OpenPayload(p *commonpb.Payload) (*commonpb.Payload, error) {
	ps, err := d.codec.Decode([]*commonpb.Payload{p})
	if err != nil {
		return nil, err
	}
	return ps[0], nil
}

// FailureConverter is the SDK's default failure converter with encoded common attributes (a
// failure's message and stack trace move into a payload the codec seals), over a data
// converter that gets the serialization context too, so details and attributes are sealed
// for the failing workflow's tenant.
type FailureConverter struct {
	dc    converter.DataConverter
	plain *temporal.DefaultFailureConverter
}

// NewFailureConverter is the failure converter over dc (NewDataConverter's).
func NewFailureConverter(dc converter.DataConverter) *FailureConverter {
	return &FailureConverter{dc: dc,
		plain: temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc})}
}

var _ converter.FailureConverterWithSerializationContext = (*FailureConverter)(nil)

// WithSerializationContext is the converter for one workflow's or activity's failures.
func (f *FailureConverter) WithSerializationContext(sc converter.SerializationContext) converter.FailureConverter {
	return NewFailureConverter(converter.WithDataConverterSerializationContext(f.dc, sc))
}

// withheld replaces a failure message that could not be sealed: the SDK's own converter
// panics there, which would crash a client call or wedge a workflow task over a message.
const withheld = "failure message withheld: it could not be encrypted"

// ErrorToFailure converts err and seals each level's message and stack trace.
func (f *FailureConverter) ErrorToFailure(err error) *failurepb.Failure {
	fl := f.plain.ErrorToFailure(err)
	for x := fl; x != nil; x = x.GetCause() {
		if x.GetEncodedAttributes() != nil {
			continue // read back from history: sealed already
		}
		if e := converter.EncodeCommonFailureAttributes(f.dc, x); e != nil {
			x.Message, x.StackTrace = withheld, ""
		}
	}
	return fl
}

// FailureToError opens the sealed attributes (DefaultFailureConverter does, with dc) and
// converts; a failure recorded before encryption reads as it was.
func (f *FailureConverter) FailureToError(fl *failurepb.Failure) error {
	return f.plain.FailureToError(fl)
}

// DecodeFailure opens the sealed message and stack trace of fl and its causes in place, for
// readers of raw history (a job's story). A failure that will not open keeps its placeholder.
func DecodeFailure(dc converter.DataConverter, fl *failurepb.Failure) {
	for x := fl; x != nil; x = x.GetCause() {
		converter.DecodeCommonFailureAttributes(dc, x)
	}
}

// Describe says, for errors and logs, what a payload is: sealed for which tenant under which
// key, or clear. Never its content.
func Describe(p *commonpb.Payload) string {
	env, ok, err := parseEnvelope(p)
	switch {
	case err != nil:
		return err.Error()
	case !ok:
		return "clear payload (" + string(p.GetMetadata()[converter.MetadataEncoding]) + ")"
	}
	return fmt.Sprintf("encrypted payload of tenant %s, key %s", env.tenant, env.keyID)
}
