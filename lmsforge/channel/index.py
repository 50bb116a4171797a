"""A folder channel's index files, rebuilt without losing what the channel's keepers put there.

rattler's ``index_fs`` writes ``<subdir>/repodata.json`` (and ``.zst``) from the package files
alone. A channel that has been run for a while holds more: records hot-fixed in place (a
tightened ``depends``), a ``removed`` list (files kept on disk but taken out of the index), and
index files other tools write — ``current_repodata.json`` (conda reads it first),
``repodata.json.bz2``, ``repodata_from_packages.json`` (conda-index's unpatched index) and
``channeldata.json``. So after ``index_fs`` ran on the staged copy, ``merge_into_staging``:

* keeps the channel's record, byte for byte, for every file it already listed (hot-fixes stay);
  new files get the fresh record; records of files no longer on disk go;
* keeps ``removed`` and every other top-level key, and leaves removed files out of the index;
* always writes ``current_repodata.json`` (the newest version of each package; conda reads it
  first and falls back to ``repodata.json`` only when it does not solve), rewrites
  ``repodata_from_packages.json`` when the channel has one, and ``channeldata.json``'s subdirs and
  versions;
* keeps every compressed copy of each index file it writes in step with it: ``<index>.zst``
  (always; conda and rattler read it before the ``.json``) and ``<index>.bz2`` are compressed
  again from the new file; a copy in another compressed format (``.gz``, ``.xz``, ...:
  ``OTHER_COMPRESSED``) would go stale, so it is returned to the publisher, which removes it.
  A stale ``current_repodata.json.zst`` made conda on a GPU host install the CPU build of a
  package whose CUDA build had just been published.

Files it does not touch: ``index.html`` listings (no client reads them) and the sharded index
(``repodata_shards.msgpack.zst``, which the publisher removes so readers fall back to
``repodata.json``).
"""

from __future__ import annotations

import bz2
import json
from pathlib import Path
from typing import Iterable

import zstandard

RECORD_KEYS = ("packages", "packages.conda")
REPODATA = "repodata.json"
CURRENT = "current_repodata.json"
FROM_PACKAGES = "repodata_from_packages.json"
CHANNELDATA = "channeldata.json"
COMPRESSORS = {  # the copies we write; conda and rattler read .zst first, .bz2 is conda's old one
    ".zst": lambda data: zstandard.ZstdCompressor(level=19).compress(data),
    ".bz2": bz2.compress,
}
ALWAYS_COMPRESSED = (".zst",)
# compressed copies in other formats (what a web server or another tool may have put there); we do
# not write them, so they are removed rather than left to contradict their source. Other names
# (a keeper's ``repodata.json.bak``) are not copies a client reads and are left alone.
OTHER_COMPRESSED = (".gz", ".xz", ".lzma", ".br", ".lz4", ".zstd", ".Z", ".zip", ".7z")


def merge_into_staging(channel: Path, staging: Path) -> list[Path]:
    """Make STAGING's index files (fresh from ``index_fs``) keep CHANNEL's metadata; see above.
    Returns the files in CHANNEL to remove when the new index is committed: compressed copies of
    an index file in a format we do not write, which would otherwise contradict it."""
    obsolete: list[Path] = []
    for subdir in sorted(p for p in staging.iterdir() if p.is_dir()):
        fresh_file = subdir / REPODATA
        if not fresh_file.is_file():
            continue
        fresh = json.loads(fresh_file.read_text())
        old_file = channel / subdir.name / REPODATA
        old = json.loads(old_file.read_text()) if old_file.is_file() else None
        merged = merge(old, fresh)
        written = {REPODATA: merged, CURRENT: current(merged)}
        if (channel / subdir.name / FROM_PACKAGES).is_file():
            written[FROM_PACKAGES] = fresh
        for name, data in written.items():
            _write_json(subdir / name, data)
            obsolete += _compress_copies(subdir / name, channel / subdir.name)
    if (channel / CHANNELDATA).is_file():
        channeldata = json.loads((channel / CHANNELDATA).read_text())
        _write_json(staging / CHANNELDATA, refresh_channeldata(channeldata, staging))
    return obsolete


def drop_misplaced(staging: Path) -> list[str]:
    """Take out of each freshly indexed ``<subdir>/repodata.json`` in STAGING the packages whose
    own ``info/index.json`` declares another subdir; return one warning per package.

    ``index_fs`` lists a record with the subdir the package declares, whatever folder it sits
    in: a linux-64 package copied into ``noarch/`` by hand would be offered to every platform.
    Such a file is left where it is (it is someone's; ``publish`` itself never puts one there),
    only unlisted, so the next publish after it is moved indexes it again."""
    warnings = []
    for index_file in sorted(staging.glob(f"*/{REPODATA}")):
        folder = index_file.parent.name
        data = json.loads(index_file.read_text())
        changed = False
        for key in RECORD_KEYS:
            records = data.get(key, {})
            for name in sorted(records):
                declared = records[name].get("subdir")
                if declared and declared != folder:
                    del records[name]
                    changed = True
                    warnings.append(f"{folder}/{name} declares subdir {declared!r} in its "
                                    f"info/index.json, so it was left out of {folder}'s index; "
                                    f"move it to {declared}/ (or remove it)")
        if changed:
            _write_json(index_file, data)
    return warnings


def _compress_copies(source: Path, channel_subdir: Path) -> list[Path]:
    """Write every compressed copy of SOURCE (staged) that the channel or the staging folder has,
    and the ``.zst`` always; return the channel's copies in formats we do not write."""
    prefix = source.name + "."
    suffixes = {"." + p.name[len(prefix):] for folder in (source.parent, channel_subdir)
                if folder.is_dir() for p in folder.iterdir()
                if p.name.startswith(prefix) and p.is_file()}
    data = source.read_bytes()
    obsolete = []
    for suffix in sorted(suffixes | set(ALWAYS_COMPRESSED)):
        copy = source.with_name(source.name + suffix)
        if suffix in COMPRESSORS:
            copy.write_bytes(COMPRESSORS[suffix](data))
            continue
        if suffix not in OTHER_COMPRESSED:
            continue
        copy.unlink(missing_ok=True)
        if (channel_subdir / copy.name).exists():
            obsolete.append(channel_subdir / copy.name)
    return obsolete


def merge(old: dict | None, fresh: dict) -> dict:
    """FRESH (indexed from the files) with OLD's records, ``removed`` list and other keys kept."""
    if not old:
        return fresh
    merged = dict(old)
    removed = set(old.get("removed", []))
    for key in RECORD_KEYS:
        old_records = old.get(key, {})
        merged[key] = {name: old_records.get(name, record)
                       for name, record in fresh.get(key, {}).items() if name not in removed}
    merged.setdefault("info", fresh.get("info", {}))
    return merged


def current(repodata: dict) -> dict:
    """REPODATA reduced to the newest version of each package (every build of that version)."""
    from rattler import Version

    newest: dict[str, Version] = {}
    for record in _records(repodata):
        version = Version(record["version"])
        if record["name"] not in newest or version > newest[record["name"]]:
            newest[record["name"]] = version
    result = dict(repodata)
    for key in RECORD_KEYS:
        result[key] = {name: record for name, record in repodata.get(key, {}).items()
                       if Version(record["version"]) == newest[record["name"]]}
    return result


def refresh_channeldata(channeldata: dict, staging: Path) -> dict:
    """CHANNELDATA with its subdirs, and each package's subdirs and newest version, brought up to
    date with the merged indexes in STAGING; every other field is kept."""
    from rattler import Version

    result = dict(channeldata)
    packages = {name: dict(entry) for name, entry in channeldata.get("packages", {}).items()}
    subdirs = set(channeldata.get("subdirs", []))
    for repodata_file in staging.glob(f"*/{REPODATA}"):
        subdir = repodata_file.parent.name
        records = list(_records(json.loads(repodata_file.read_text())))
        if records:
            subdirs.add(subdir)
        for record in records:
            entry = packages.setdefault(record["name"], {})
            entry["subdirs"] = sorted(set(entry.get("subdirs", [])) | {subdir})
            if "version" not in entry or Version(record["version"]) > Version(entry["version"]):
                entry["version"] = record["version"]
    result["packages"] = packages
    result["subdirs"] = sorted(subdirs)
    return result


def _records(repodata: dict) -> Iterable[dict]:
    for key in RECORD_KEYS:
        yield from repodata.get(key, {}).values()


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
