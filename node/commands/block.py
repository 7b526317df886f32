"""``odf block encode|decode``: single metadata blocks, to and from their manifests."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fbs.errors import MalformedBlock, ManifestError
from node.cli_util import EXIT_OK

__all__ = ["cmd_block_decode", "cmd_block_encode", "register"]


def cmd_block_encode(args: argparse.Namespace) -> int:
    from fbs.codec import block_hash, encode_block
    from fbs.manifest import load_block_yaml

    text = _read_input(args.manifest)
    loaded = load_block_yaml(text)
    version = args.block_version or loaded.version or 2
    block = loaded.block
    data = encode_block(block, version=version)
    h = block_hash(data)
    if args.output == "-":
        # Binary on stdout for pipes; the hash goes to stderr so the pipe stays clean.
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        sys.stderr.write(f"{h}\n")
        return EXIT_OK
    if args.output:
        from storage.fsutil import write_file_durably

        write_file_durably(Path(args.output), data)
    print(h)
    return EXIT_OK


def cmd_block_decode(args: argparse.Namespace) -> int:
    from fbs.codec import block_hash, decode_block_versioned
    from fbs.manifest import dump_block_yaml, dumps_json

    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    try:
        block, version = decode_block_versioned(data)
    except MalformedBlock as e:
        raise type(e)(f"{args.file}: not a valid ODF block: {e}") from None
    if args.output_format == "json":
        sys.stdout.write(dumps_json(block, version=version, indent=2) + "\n")
    else:
        sys.stdout.write(dump_block_yaml(block, version=version))
    sys.stderr.write(f"# hash: {block_hash(data)}\n")
    return EXIT_OK


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not UTF-8 text: {e}") from None


def register(sub: Any) -> None:
    """Add ``block`` to the ``odf`` sub-parsers."""
    block = sub.add_parser("block", help="encode/decode single metadata blocks")
    bsub = block.add_subparsers(dest="block_command", required=True, metavar="COMMAND")
    p = bsub.add_parser("encode", help="encode a MetadataBlock YAML manifest to binary")
    p.set_defaults(func=cmd_block_encode)
    p.add_argument("manifest", help="MetadataBlock manifest (YAML), or - for stdin")
    p.add_argument(
        "--block-version",
        type=int,
        choices=[2, 3],
        default=None,
        help="binary layout version (default: the manifest's, else 2)",
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the binary block to FILE (- for stdout); the hash is always printed",
    )
    p = bsub.add_parser("decode", help="decode a binary block to YAML/JSON")
    p.set_defaults(func=cmd_block_decode)
    p.add_argument("file", help="binary block file, or - for stdin")
    p.add_argument("--output-format", choices=["yaml", "json"], default="yaml")
