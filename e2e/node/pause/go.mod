// The pod sandbox's process for the e2e node (see ../README.md): built with
// CGO_ENABLED=0 into a static binary and put into the pause image by
// scripts/oci-image.py. No dependencies.
module sigil-e2e/pause

go 1.26.0
