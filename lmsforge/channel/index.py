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
* rewrites, from the merged index, every other index file the channel already had
  (``current_repodata.json`` = the newest version of each package, which conda falls back from to
  ``repodata.json`` when it does not solve), and ``channeldata.json``'s subdirs and versions.

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
REFRESHED_COPIES = {"repodata.json.bz2": "bz2", "repodata.json.zst": "zst"}
CURRENT = "current_repodata.json"
FROM_PACKAGES = "repodata_from_packages.json"
CHANNELDATA = "channeldata.json"


def merge_into_staging(channel: Path, staging: Path) -> None:
    """Make STAGING's index files (fresh from ``index_fs``) keep CHANNEL's metadata; see above."""
    for subdir in sorted(p for p in staging.iterdir() if p.is_dir()):
        fresh_file = subdir / REPODATA
        if not fresh_file.is_file():
            continue
        fresh = json.loads(fresh_file.read_text())
        old_file = channel / subdir.name / REPODATA
        old = json.loads(old_file.read_text()) if old_file.is_file() else None
        merged = merge(old, fresh)
        _write_json(fresh_file, merged)
        if (channel / subdir.name / FROM_PACKAGES).is_file():
            _write_json(subdir / FROM_PACKAGES, fresh)
        if (channel / subdir.name / CURRENT).is_file():
            _write_json(subdir / CURRENT, current(merged))
        for name, codec in REFRESHED_COPIES.items():
            if (subdir / name).is_file() or (channel / subdir.name / name).is_file():
                data = fresh_file.read_bytes()
                packed = bz2.compress(data) if codec == "bz2" else \
                    zstandard.ZstdCompressor(level=19).compress(data)
                (subdir / name).write_bytes(packed)
    if (channel / CHANNELDATA).is_file():
        channeldata = json.loads((channel / CHANNELDATA).read_text())
        _write_json(staging / CHANNELDATA, refresh_channeldata(channeldata, staging))


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
