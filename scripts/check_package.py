#!/usr/bin/env python3
"""Checks what `sam package` uploaded: every function's zip is a Lambda custom runtime for arm64.

Usage: check_package.py PACKAGED_TEMPLATE [--extract DIR] | check_package.py --self-test

Reads the packaged template's `AWS::Serverless::Function` CodeUri (s3://bucket/key), fetches each object from
S3 (boto3; AWS_ENDPOINT_URL_S3 points it at a local S3 such as moto's) and fails unless the zip holds an
executable `bootstrap` at its root that is an arm64 ELF (the template's Architectures), and nothing else of
size: a `sam deploy` of the source template zips the repository instead (no bootstrap at the root, or target/
and .local/ inside, over Lambda's 250 MB). `--extract DIR` writes each good zip's `bootstrap` to
DIR/<LogicalId>/bootstrap (executable), for the cold start of exactly those binaries (`cold-start` in
scripts/release-check). `--self-test` runs the zip
rule on zips it makes (one good, one per way of being wrong) so a rule that cannot fail does not go unnoticed.
"""
import io
import stat
import struct
import sys
import zipfile
from pathlib import Path

# An ELF's e_machine for AArch64 (and x86-64, for the self-test's wrong binary).
EM_AARCH64 = 183
EM_X86_64 = 62
# Anything else in the zip up to this size is tolerated (a license file, say); a source tree or a target/ is not.
OTHER_FILES_MAX_BYTES = 64 * 1024


def elf_machine(data):
    """The ELF e_machine of `data`, or None when it is no ELF."""
    if len(data) < 20 or data[:4] != b"\x7fELF":
        return None
    endian = "<" if data[5] == 1 else ">"
    return struct.unpack(endian + "H", data[18:20])[0]


def zip_findings(name, blob):
    """What is wrong with one function's zip (`blob`): empty when it is an arm64 custom runtime."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(blob))
    except zipfile.BadZipFile:
        return [f"{name}: its code is not a zip"]
    entries = {info.filename: info for info in archive.infolist()}
    findings = []
    boot = entries.get("bootstrap")
    if boot is None:
        findings.append(f"{name}: no 'bootstrap' at the zip's root ({len(entries)} entries)")
    else:
        mode = boot.external_attr >> 16
        if not mode & stat.S_IXUSR:
            findings.append(f"{name}: 'bootstrap' is not executable (mode {oct(mode)})")
        machine = elf_machine(archive.read(boot))
        if machine != EM_AARCH64:
            findings.append(f"{name}: 'bootstrap' is not an arm64 ELF (e_machine {machine})")
    for path, info in entries.items():
        if path != "bootstrap" and info.file_size > OTHER_FILES_MAX_BYTES:
            findings.append(f"{name}: '{path}' ({info.file_size} bytes) is in the zip beside bootstrap")
    return findings


def functions(template_path):
    """(logical id, bucket, key) of every function's CodeUri in the packaged template."""
    import yaml  # noqa: PLC0415 (the self-test needs no YAML)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_template import _Loader  # noqa: PLC0415 (CloudFormation's short-form tags)

    doc = yaml.load(Path(template_path).read_text(), Loader=_Loader)
    found = []
    for logical_id, resource in doc.get("Resources", {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        uri = resource.get("Properties", {}).get("CodeUri", "")
        if not isinstance(uri, str) or not uri.startswith("s3://"):
            raise SystemExit(f"{logical_id}: CodeUri {uri!r} is not an s3:// URI (was the template packaged?)")
        bucket, key = uri[len("s3://") :].split("/", 1)
        found.append((logical_id, bucket, key))
    return found


def extract_bootstrap(blob, target):
    """Writes the `bootstrap` of the zip `blob` to `target`, executable."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(zipfile.ZipFile(io.BytesIO(blob)).read("bootstrap"))
    target.chmod(0o755)


def check_packaged(template_path, extract_dir=None):
    import boto3  # noqa: PLC0415 (the self-test needs no SDK)

    s3 = boto3.client("s3")
    found = functions(template_path)
    if not found:
        return [f"{template_path}: no AWS::Serverless::Function"]
    findings = []
    for logical_id, bucket, key in found:
        blob = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        problems = zip_findings(logical_id, blob)
        findings += problems
        if not problems:
            print(f"{logical_id}: s3://{bucket}/{key} holds an arm64 bootstrap ({len(blob)} bytes zipped)")
            if extract_dir is not None:
                extract_bootstrap(blob, Path(extract_dir) / logical_id / "bootstrap")
    return findings


def make_zip(files):
    """A zip of {path: (bytes, mode)}."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for path, (data, mode) in files.items():
            info = zipfile.ZipInfo(path)
            info.external_attr = (stat.S_IFREG | mode) << 16
            archive.writestr(info, data)
    return out.getvalue()


def fake_elf(machine):
    return b"\x7fELF\x02\x01\x01" + bytes(11) + struct.pack("<H", machine) + bytes(44)


def self_test():
    arm = fake_elf(EM_AARCH64)
    cases = {
        "good": make_zip({"bootstrap": (arm, 0o755), "LICENSE": (b"MIT", 0o644)}),
        "no bootstrap at the root": make_zip({"target/bootstrap": (arm, 0o755)}),
        "bootstrap not executable": make_zip({"bootstrap": (arm, 0o644)}),
        "bootstrap for x86-64": make_zip({"bootstrap": (fake_elf(EM_X86_64), 0o755)}),
        "bootstrap a script": make_zip({"bootstrap": (b"#!/bin/sh\n", 0o755)}),
        "the source tree beside it": make_zip(
            {"bootstrap": (arm, 0o755), "target/debug/big": (bytes(OTHER_FILES_MAX_BYTES + 1), 0o644)}
        ),
        "not a zip": b"PK?",
    }
    failures = []
    for case, blob in cases.items():
        findings = zip_findings(case, blob)
        if (case == "good") == bool(findings):
            failures.append(f"self-test: '{case}' gave {findings or 'no finding'}")
    return failures, len(cases) - 1


def main(argv):
    if "--self-test" in argv:
        failures, mutations = self_test()
        for failure in failures:
            print(failure, file=sys.stderr)
        if not failures:
            print(f"check_package self-test: a good zip passes and each of {mutations} broken ones is caught")
        return 1 if failures else 0
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    extract_dir = argv[argv.index("--extract") + 1] if "--extract" in argv[1:-1] else None
    findings = check_packaged(argv[0], extract_dir)
    for finding in findings:
        print(finding, file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
