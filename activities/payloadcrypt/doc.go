// Package payloadcrypt keeps tenants' words out of Temporal: a payload codec (AES-256-GCM)
// that every jobgate client and worker puts in its data converter, a failure converter that
// moves failure messages into encoded attributes, and the per-tenant data keys both use.
//
// A payload is encrypted under its tenant's newest data key; the tenant comes from the
// workflow ID the SDK hands the codec as its serialization context (a jobgate workflow ID is
// "<tenant>/<kind>/<owner>/<key>", and every child's ID begins with its parent's). The
// envelope's metadata names the tenant and the key ID, so decoding needs no context: the
// frontend decodes memos of listed jobs without knowing whose they are. A payload without the
// envelope (written before encryption) is passed through untouched, so old and mixed
// histories still decode and replay.
//
// Data keys are envelope keys: 32 random bytes made on a tenant's first payload, stored in a
// gocloud.dev/blob bucket (the artifact store, under keys/) wrapped by a key-encryption key
// from gocloud.dev/secrets (base64key:// in dev, a KMS in production), and kept unwrapped in a
// bounded in-memory cache. Rotation adds a newer key; new payloads use it, old ones still
// name theirs.
//
// It is a leaf under activities (like activities/contract): it imports authz and no SQL
// driver, so whatever links it links no database.
package payloadcrypt
