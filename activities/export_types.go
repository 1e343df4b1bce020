package activities

// ManifestSealer seals a manifest's JSON (without its manifest_seal) for the manifest_seal
// field. It is injected by cmd (frontend/handle's keyring: activities import no frontend).
type ManifestSealer interface {
	SealManifest(manifestJSON []byte) (string, error)
}
