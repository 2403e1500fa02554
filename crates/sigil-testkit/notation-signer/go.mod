// The testkit's Notary Project signer: notation-go, the reference library,
// signing what sigil's tests mint (see main.go). Built by
// scripts/install-tools.sh notation-signer; the tests that use it run in
// `make test-registry`.
module github.com/sigil-dev/sigil/crates/sigil-testkit/notation-signer

go 1.24

require (
	github.com/notaryproject/notation-go v1.3.2
	github.com/opencontainers/go-digest v1.0.0
	github.com/opencontainers/image-spec v1.1.1
)

require (
	github.com/Azure/go-ntlmssp v0.0.0-20221128193559-754e69321358 // indirect
	github.com/fxamacker/cbor/v2 v2.8.0 // indirect
	github.com/go-asn1-ber/asn1-ber v1.5.7 // indirect
	github.com/go-ldap/ldap/v3 v3.4.10 // indirect
	github.com/golang-jwt/jwt/v4 v4.5.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/notaryproject/notation-core-go v1.3.0 // indirect
	github.com/notaryproject/notation-plugin-framework-go v1.0.0 // indirect
	github.com/notaryproject/tspclient-go v1.0.0 // indirect
	github.com/veraison/go-cose v1.3.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/crypto v0.37.0 // indirect
	golang.org/x/mod v0.24.0 // indirect
	golang.org/x/sync v0.10.0 // indirect
	oras.land/oras-go/v2 v2.5.0 // indirect
)
