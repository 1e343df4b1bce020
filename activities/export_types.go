package activities

// ManifestSealer seals a manifest's JSON (without its manifest_seal) for the manifest_seal
// field. It is injected by cmd (frontend/handle's keyring: activities import no frontend).
type ManifestSealer interface {
	SealManifest(manifestJSON []byte) (string, error)
}

// ManifestSigner signs a manifest's JSON (without its manifest_signature) with Ed25519 for the
// manifest_signature field, and gives the JWK set of its public keys, written beside the
// manifest. Injected by cmd (frontend/handle's SigningKeyring), like ManifestSealer.
type ManifestSigner interface {
	SignManifest(manifestJSON []byte) (string, error)
	PublicJWKS() []byte
}
