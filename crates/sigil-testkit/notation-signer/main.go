// Command notation-signer signs an OCI artifact with notation-go, the Notary
// Project's reference library, so that sigil's tests verify envelopes made
// by the reference implementation and not only by the Rust testkit.
//
// The key (PEM, PKCS#8 or SEC 1) and the certificate chain (PEM, signing
// certificate first) come from files the test mints; the envelope (JWS or
// COSE) is written to standard output. With -expiry the signature carries
// an expiry that far from now.
//
//	notation-signer -key leaf.key -chain chain.pem -format jws|cose \
//	    -media-type application/vnd.oci.image.manifest.v1+json \
//	    -digest sha256:... -size 1234 [-expiry 1h] > envelope
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/notaryproject/notation-go"
	"github.com/notaryproject/notation-go/signer"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func main() {
	key := flag.String("key", "", "the signing key, PEM")
	chain := flag.String("chain", "", "the certificate chain, PEM, signing certificate first")
	format := flag.String("format", "jws", "envelope format: jws or cose")
	mediaType := flag.String("media-type", ocispec.MediaTypeImageManifest, "the artifact's media type")
	dgst := flag.String("digest", "", "the artifact's digest, sha256:<hex>")
	size := flag.Int64("size", 0, "the artifact's size in bytes")
	expiry := flag.Duration("expiry", 0, "how long the signature is valid (0: no expiry)")
	flag.Parse()
	if err := run(*key, *chain, *format, *mediaType, *dgst, *size, *expiry); err != nil {
		fmt.Fprintf(os.Stderr, "notation-signer: %v\n", err)
		os.Exit(1)
	}
}

func run(key, chain, format, mediaType, dgst string, size int64, expiry time.Duration) error {
	envelopeType := map[string]string{
		"jws":  "application/jose+json",
		"cose": "application/cose",
	}[format]
	if envelopeType == "" {
		return fmt.Errorf("-format %q: give jws or cose", format)
	}
	parsed, err := digest.Parse(dgst)
	if err != nil {
		return fmt.Errorf("-digest %q: %w", dgst, err)
	}
	s, err := signer.NewGenericSignerFromFiles(key, chain)
	if err != nil {
		return fmt.Errorf("reading -key %s and -chain %s: %w", key, chain, err)
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: parsed, Size: size}
	envelope, _, err := s.Sign(context.Background(), desc, notation.SignerSignOptions{
		SignatureMediaType: envelopeType,
		ExpiryDuration:     expiry,
		SigningAgent:       "sigil-testkit notation-signer",
	})
	if err != nil {
		return fmt.Errorf("signing %s: %w", dgst, err)
	}
	_, err = os.Stdout.Write(envelope)
	return err
}
