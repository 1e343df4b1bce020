package app

// Cloud artifact stores for production: s3://bucket?region=…, gs://bucket, azblob://container.
// Credentials come from each SDK's default chain (environment, instance or workload identity),
// never from flags.
//
// The drivers register themselves with gocloud.dev/blob's URL registry, which
// activities.OpenArtifactStore (worker) and the frontend's download store (serve) open by URL.
// They are linked here, in the binary's wiring, and not in activities: the three cloud SDKs are
// most of a build's dependencies, and every package that imports activities or workflows (and
// every test binary of one) would otherwise carry them. file:// and mem:// stay in activities.
//
// The key-encryption keys of payload encryption (activities/payloadcrypt) come the same way:
// awskms://, gcpkms:// and azurekeyvault:// keepers register with gocloud.dev/secrets here;
// base64key:// (dev) is in payloadcrypt itself.
import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
	_ "gocloud.dev/secrets/awskms"
	_ "gocloud.dev/secrets/azurekeyvault"
	_ "gocloud.dev/secrets/gcpkms"
)
