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
//
// With -verify-loop COUNT it verifies instead: the envelope against the
// artifact COUNT times with notation-go's verifier, under the trust policy
// and trust store of a Notation configuration directory, so that the CPU
// notation-go spends per verification can be set beside sigil's
// (bench/notation-go.sh).
//
//	notation-signer -verify-loop 1000 -config DIR -envelope sig.jws \
//	    -reference registry.example/acme/app@sha256:... -digest sha256:... -size 1234
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/notaryproject/notation-go"
	"github.com/notaryproject/notation-go/dir"
	"github.com/notaryproject/notation-go/signer"
	"github.com/notaryproject/notation-go/verifier"
	"github.com/notaryproject/notation-go/verifier/trustpolicy"
	"github.com/notaryproject/notation-go/verifier/truststore"
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
	loops := flag.Int("verify-loop", 0, "verify -envelope this many times instead of signing")
	config := flag.String("config", "", "with -verify-loop: the Notation configuration directory")
	envelope := flag.String("envelope", "", "with -verify-loop: the envelope (.jws or .cose)")
	reference := flag.String("reference", "", "with -verify-loop: the artifact's full reference")
	flag.Parse()
	var err error
	if *loops > 0 {
		err = verifyLoop(*loops, *config, *envelope, *reference, *mediaType, *dgst, *size)
	} else {
		err = run(*key, *chain, *format, *mediaType, *dgst, *size, *expiry)
	}
	if err != nil {
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

func verifyLoop(loops int, config, envelope, reference, mediaType, dgst string, size int64) error {
	raw, err := os.ReadFile(filepath.Join(config, "trustpolicy.json"))
	if err != nil {
		return err
	}
	var policy trustpolicy.Document
	if err := json.Unmarshal(raw, &policy); err != nil {
		return fmt.Errorf("%s/trustpolicy.json: %w", config, err)
	}
	store := truststore.NewX509TrustStore(dir.NewSysFS(config))
	v, err := verifier.New(&policy, store, nil)
	if err != nil {
		return err
	}
	signature, err := os.ReadFile(envelope)
	if err != nil {
		return err
	}
	envelopeType := "application/jose+json"
	if strings.HasSuffix(envelope, ".cose") {
		envelopeType = "application/cose"
	}
	parsed, err := digest.Parse(dgst)
	if err != nil {
		return fmt.Errorf("-digest %q: %w", dgst, err)
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: parsed, Size: size}
	opts := notation.VerifierVerifyOptions{ArtifactReference: reference, SignatureMediaType: envelopeType}
	for i := 0; i < loops; i++ {
		outcome, err := v.Verify(context.Background(), desc, signature, opts)
		if err != nil {
			return fmt.Errorf("verification %d: %w", i, err)
		}
		if outcome.Error != nil {
			return fmt.Errorf("verification %d: %w", i, outcome.Error)
		}
	}
	fmt.Printf("%d verifications\n", loops)
	return nil
}
