#!/usr/bin/env python3
"""Builds an OCI image without a container engine, reproducibly.

An image is at most two layers:

  base  files of Debian packages (.deb archives given with --deb, maintainer
        scripts never run), plus what those scripts or a distroless base would
        have made: a CA bundle (--ca-bundle), a user database with `nonroot`
        (--users), dpkg metadata in var/lib/dpkg/status.d/ so scanners and SBOM
        tools see the packages;
  files what --file adds (binaries, configuration), after the base.

and a config (--entrypoint, --cmd, --user, --env, --label, --workdir). It is
written as an OCI image layout (--out DIR: oci-layout, index.json, blobs/),
and the manifest digest is printed on stdout.

Reproducible: the same inputs give the same digest. Every tar entry has the
time --epoch (default $SOURCE_DATE_EPOCH, else 0), owner 0:0 (the nonroot home
excepted), no user or group names, and entries are sorted by path; gzip
headers carry no name and time; JSON is written with sorted keys. No path of
the machine that builds the image reaches it: entries are named by their path
in the image, and the history names packages and destination paths only.

Usage (sigil's image: scripts/image.sh):
  oci-image.py --out DIR [--tag TAG]
      [--deb FILE.deb[=PATH,PATH...]]...   whole package, or only these paths
      [--ca-bundle] [--users]
      [--file SRC:DEST[:MODE]]...
      [--entrypoint JSON-ARRAY] [--cmd JSON-ARRAY] [--user USER[:GROUP]]
      [--env NAME=VALUE]... [--label NAME=VALUE]... [--workdir DIR]
      [--platform linux/amd64] [--epoch SECONDS]

Only the Python standard library is used; .deb members may be gzip, xz or
uncompressed tar (not zstd).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import sys
import tarfile
from dataclasses import dataclass, field

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"

# What a distroless base leaves out of a package: documentation (bar the
# copyright notices, which licences ask to keep), manuals, lintian overrides.
DROPPED_PREFIXES = ("usr/share/man/", "usr/share/info/", "usr/share/lintian/", "usr/share/doc-base/")

NONROOT_UID = 65532
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"


class BuildError(Exception):
    """A failure the user can act on; printed without a traceback."""


@dataclass
class Entry:
    """One tar entry, by its path in the image (no leading slash)."""

    path: str
    kind: bytes  # tarfile.REGTYPE, DIRTYPE or SYMTYPE
    mode: int
    data: bytes = b""
    link: str = ""
    uid: int = 0
    gid: int = 0


@dataclass
class Layer:
    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, entry: Entry) -> None:
        self.entries[entry.path] = entry

    def add_parents(self, path: str) -> None:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/".join(parts[:i])
            if parent not in self.entries:
                self.entries[parent] = Entry(parent, tarfile.DIRTYPE, 0o755)


def normalize(name: str) -> str:
    """`./usr/lib/` and `/usr/lib` -> `usr/lib`; `.` -> ``."""
    while name.startswith("./"):
        name = name[2:]
    name = name.lstrip("/").rstrip("/")
    return "" if name == "." else name


def read_ar(path: str) -> dict[str, bytes]:
    """The members of a Debian package (an `ar` archive)."""
    with open(path, "rb") as f:
        blob = f.read()
    if not blob.startswith(b"!<arch>\n"):
        raise BuildError(f"{path} is not a Debian package (no ar header)")
    members: dict[str, bytes] = {}
    pos = 8
    while pos + 60 <= len(blob):
        header = blob[pos : pos + 60]
        name = header[0:16].decode("ascii").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError as e:
            raise BuildError(f"{path}: corrupt ar member header at byte {pos}") from e
        pos += 60
        members[name] = blob[pos : pos + size]
        pos += size + (size % 2)
    return members


def open_member_tar(deb: str, members: dict[str, bytes], stem: str) -> tarfile.TarFile:
    for name, data in members.items():
        if not name.startswith(stem + ".tar"):
            continue
        suffix = name[len(stem) + 4 :]
        if suffix == ".xz":
            data = lzma.decompress(data)
        elif suffix == ".gz":
            data = gzip.decompress(data)
        elif suffix == ".zst":
            raise BuildError(f"{deb}: {name} is zstd-compressed, which this builder does not read")
        elif suffix:
            raise BuildError(f"{deb}: unknown compression of {name}")
        return tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    raise BuildError(f"{deb}: no {stem}.tar* member")


def control_fields(deb: str, members: dict[str, bytes]) -> tuple[str, str, str]:
    """(package, version, control paragraph)."""
    with open_member_tar(deb, members, "control") as tar:
        for m in tar.getmembers():
            if normalize(m.name) == "control":
                f = tar.extractfile(m)
                text = f.read().decode("utf-8") if f else ""
                break
        else:
            raise BuildError(f"{deb}: control.tar has no control file")
    fields = {}
    for line in text.splitlines():
        if line and not line[0].isspace() and ":" in line:
            k, v = line.split(":", 1)
            fields[k] = v.strip()
    if "Package" not in fields or "Version" not in fields:
        raise BuildError(f"{deb}: control file without Package or Version")
    return fields["Package"], fields["Version"], text.rstrip("\n") + "\n"


def wanted(path: str, only: list[str] | None) -> bool:
    if only is not None:
        return any(path == o or path.startswith(o + "/") for o in only)
    if any(path.startswith(p) or path + "/" == p for p in DROPPED_PREFIXES):
        return False
    if path.startswith("usr/share/doc/"):
        rest = path[len("usr/share/doc/") :]
        # the package's doc directory itself and its copyright file stay
        return "/" not in rest or rest.endswith("/copyright")
    return True


def add_deb(layer: Layer, deb: str, only: list[str] | None) -> str:
    """Adds a package's files; returns `package=version`."""
    members = read_ar(deb)
    package, version, control = control_fields(deb, members)
    found = set()
    with open_member_tar(deb, members, "data") as tar:
        for m in tar.getmembers():
            path = normalize(m.name)
            if not path or not wanted(path, only):
                continue
            found.add(path)
            mode = m.mode & 0o7777
            if m.isdir():
                layer.add(Entry(path, tarfile.DIRTYPE, mode))
            elif m.issym():
                layer.add(Entry(path, tarfile.SYMTYPE, 0o777, link=m.linkname))
            elif m.isfile() or m.islnk():
                # Hard links become copies: sorting may put a link before its target.
                source = tar.getmember(m.linkname) if m.islnk() else m
                f = tar.extractfile(source)
                layer.add(Entry(path, tarfile.REGTYPE, mode, data=f.read() if f else b""))
            else:
                raise BuildError(f"{deb}: {path} is neither file, directory nor link")
            layer.add_parents(path)
    if only is not None:
        missing = [o for o in only if o not in found]
        if missing:
            raise BuildError(f"{deb} ({package}) has no {', '.join(missing)}")
    else:
        status = f"{control.rstrip()}\nStatus: install ok installed\n"
        entry = f"var/lib/dpkg/status.d/{package}"
        layer.add(Entry(entry, tarfile.REGTYPE, 0o644, data=status.encode()))
        layer.add_parents(entry)
    return f"{package}={version}" + ("" if only is None else f" ({','.join(only)})")


def add_ca_bundle(layer: Layer) -> None:
    """What update-ca-certificates writes: every certificate, in path order."""
    certs = sorted(
        p for p, e in layer.entries.items()
        if p.startswith("usr/share/ca-certificates/") and p.endswith(".crt") and e.kind == tarfile.REGTYPE
    )
    if not certs:
        raise BuildError("--ca-bundle: no usr/share/ca-certificates/**/*.crt in the packages (add ca-certificates)")
    bundle = b"".join(layer.entries[p].data.rstrip(b"\n") + b"\n" for p in certs)
    layer.add(Entry(CA_BUNDLE, tarfile.REGTYPE, 0o644, data=bundle))
    layer.add_parents(CA_BUNDLE)


def add_users(layer: Layer) -> None:
    """root, nobody and nonroot (65532), as distroless images have them."""
    passwd = (
        "root:x:0:0:root:/root:/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
        f"nonroot:x:{NONROOT_UID}:{NONROOT_UID}:nonroot:/home/nonroot:/sbin/nologin\n"
    )
    group = f"root:x:0:\nnobody:x:65534:\nnonroot:x:{NONROOT_UID}:\n"
    files = {
        "etc/passwd": passwd,
        "etc/group": group,
        "etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
    }
    for path, text in files.items():
        layer.add(Entry(path, tarfile.REGTYPE, 0o644, data=text.encode()))
        layer.add_parents(path)
    layer.add(Entry("root", tarfile.DIRTYPE, 0o700))
    layer.add(Entry("home", tarfile.DIRTYPE, 0o755))
    layer.add(Entry("home/nonroot", tarfile.DIRTYPE, 0o700, uid=NONROOT_UID, gid=NONROOT_UID))
    layer.add(Entry("tmp", tarfile.DIRTYPE, 0o1777))


def add_file(layer: Layer, spec: str) -> str:
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].startswith("/"):
        raise BuildError(f"--file {spec!r}: expected SRC:/DEST[:MODE] (octal mode)")
    src, dest = parts[0], normalize(parts[1])
    try:
        with open(src, "rb") as f:
            data = f.read()
        mode = int(parts[2], 8) if len(parts) == 3 else (0o755 if os.access(src, os.X_OK) else 0o644)
    except OSError as e:
        raise BuildError(f"--file {spec!r}: cannot read {src}: {e.strerror}") from e
    except ValueError as e:
        raise BuildError(f"--file {spec!r}: mode {parts[2]!r} is not octal") from e
    layer.add(Entry(dest, tarfile.REGTYPE, mode, data=data))
    layer.add_parents(dest)
    return "/" + dest


def layer_blob(layer: Layer, epoch: int) -> tuple[bytes, str]:
    """(gzip blob, diff_id) of a layer."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(layer.entries):
            e = layer.entries[path]
            info = tarfile.TarInfo(path)
            info.type = e.kind
            info.mode = e.mode
            info.mtime = epoch
            info.uid, info.gid = e.uid, e.gid
            info.uname = info.gname = ""
            if e.kind == tarfile.SYMTYPE:
                info.linkname = e.link
            if e.kind == tarfile.REGTYPE:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                tar.addfile(info)
    tar_bytes = raw.getvalue()
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
        gz.write(tar_bytes)
    return out.getvalue(), "sha256:" + hashlib.sha256(tar_bytes).hexdigest()


def canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def write_blob(out: str, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(out, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return "sha256:" + digest


def key_values(items: list[str], flag: str) -> dict[str, str]:
    result = {}
    for item in items:
        if "=" not in item or item.startswith("="):
            raise BuildError(f"{flag} {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        result[k] = v
    return result


def json_array(text: str | None, flag: str) -> list[str] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise BuildError(f"{flag} {text!r} is not JSON: {e}") from e
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BuildError(f"{flag} {text!r}: expected a JSON array of strings")
    return value


def build(args: argparse.Namespace) -> str:
    epoch = args.epoch
    created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    os_name, _, arch = args.platform.partition("/")
    if not os_name or not arch:
        raise BuildError(f"--platform {args.platform!r}: expected OS/ARCH, e.g. linux/amd64")

    base, files = Layer(), Layer()
    packages = []
    for spec in args.deb:
        path, _, only = spec.partition("=")
        only_list = [normalize(p) for p in only.split(",") if p] if only else None
        packages.append(add_deb(base, path, only_list))
    if args.ca_bundle:
        add_ca_bundle(base)
    if args.users:
        add_users(base)
    added = [add_file(files, spec) for spec in args.file]

    layers: list[tuple[Layer, str]] = []
    if base.entries:
        what = "packages " + ", ".join(packages) if packages else "no packages"
        extras = [x for x, on in (("CA bundle", args.ca_bundle), ("users root/nobody/nonroot", args.users)) if on]
        layers.append((base, f"oci-image base: {what}" + ("; " + ", ".join(extras) if extras else "")))
    if files.entries:
        layers.append((files, "oci-image files: " + " ".join(added)))
    if not layers:
        raise BuildError("nothing to put in the image: give --deb, --users or --file")

    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(os.path.join(args.out, "blobs", "sha256"))
    descriptors, diff_ids, history = [], [], []
    total = 0
    for layer, comment in layers:
        blob, diff_id = layer_blob(layer, epoch)
        digest = write_blob(args.out, blob)
        descriptors.append({"mediaType": MEDIA_LAYER, "digest": digest, "size": len(blob)})
        diff_ids.append(diff_id)
        history.append({"created": created, "created_by": comment})
        total += len(blob)
        print(f"oci-image: layer {digest} {len(blob)} bytes ({len(layer.entries)} entries): {comment}", file=sys.stderr)

    config_section: dict[str, object] = {}
    env = key_values(args.env, "--env")
    if env:
        config_section["Env"] = [f"{k}={v}" for k, v in env.items()]
    entrypoint = json_array(args.entrypoint, "--entrypoint")
    if entrypoint is not None:
        config_section["Entrypoint"] = entrypoint
    cmd = json_array(args.cmd, "--cmd")
    if cmd is not None:
        config_section["Cmd"] = cmd
    if args.user:
        config_section["User"] = args.user
    if args.workdir:
        config_section["WorkingDir"] = args.workdir
    labels = key_values(args.label, "--label")
    if labels:
        config_section["Labels"] = labels
    config = {
        "architecture": arch,
        "os": os_name,
        "created": created,
        "config": config_section,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    config_bytes = canonical(config)
    config_digest = write_blob(args.out, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": descriptors,
    }
    manifest_bytes = canonical(manifest)
    manifest_digest = write_blob(args.out, manifest_bytes)
    descriptor: dict[str, object] = {
        "mediaType": MEDIA_MANIFEST,
        "digest": manifest_digest,
        "size": len(manifest_bytes),
        "platform": {"architecture": arch, "os": os_name},
    }
    if args.tag:
        descriptor["annotations"] = {"org.opencontainers.image.ref.name": args.tag}
    index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [descriptor]}
    with open(os.path.join(args.out, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(args.out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))
    total += len(config_bytes) + len(manifest_bytes)
    print(
        f"oci-image: manifest {manifest_digest}, {len(layers)} layer(s), "
        f"{total} bytes compressed ({total / 1048576:.1f} MiB)",
        file=sys.stderr,
    )
    return manifest_digest


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="oci-image.py",
        description="Build a reproducible OCI image layout from Debian packages and files.",
    )
    p.add_argument("--out", required=True, help="OCI layout directory to (re)write")
    p.add_argument("--tag", help="org.opencontainers.image.ref.name in index.json")
    p.add_argument("--deb", action="append", default=[], metavar="FILE[=PATH,...]")
    p.add_argument("--ca-bundle", action="store_true", help=f"write /{CA_BUNDLE} from the packages' certificates")
    p.add_argument("--users", action="store_true", help="/etc/passwd and /etc/group with nonroot (65532), /tmp, /home/nonroot")
    p.add_argument("--file", action="append", default=[], metavar="SRC:/DEST[:MODE]")
    p.add_argument("--entrypoint", metavar="JSON")
    p.add_argument("--cmd", metavar="JSON")
    p.add_argument("--user")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--label", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--workdir")
    p.add_argument("--platform", default="linux/amd64")
    default_epoch = os.environ.get("SOURCE_DATE_EPOCH", "0")
    p.add_argument("--epoch", type=int, default=int(default_epoch) if default_epoch.isdigit() else 0)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        print(build(args))
    except BuildError as e:
        print(f"oci-image: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
