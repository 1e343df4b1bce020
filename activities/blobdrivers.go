package activities

// Cloud artifact stores for production: s3://bucket?region=…, gs://bucket, azblob://container.
// Credentials come from each SDK's default chain (environment, instance or workload identity),
// never from flags.
import (
	_ "gocloud.dev/blob/azureblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/s3blob"
)
