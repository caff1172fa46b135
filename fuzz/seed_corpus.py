"""Write atheris seed corpora from the recorded answers: fuzz/corpus/<provider>_<api>/.

    python fuzz/seed_corpus.py

Each recorded JSON answer becomes a seed (prefix byte 0: JSON), each streamed one a seed
with prefix byte 1 (SSE, in chunks of one byte): see fuzz_adapters.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from toolloop_cli.transcripts import load_cassette

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    sources = [*ROOT.glob("tests/fixtures/*/*.yaml"), *ROOT.glob("transcripts/*.yaml")]
    written = 0
    for path in sorted(sources):
        try:
            cassette = load_cassette(path)
        except Exception:  # a fixture of another kind (a registry, a broken cassette)
            continue
        for item in cassette.interactions:
            if item.api is None:
                continue
            stream = b"text/event-stream" in str(item.response.headers).encode()
            seed = (b"\x01" if stream else b"\x00") + item.response.body
            folder = ROOT / "fuzz" / "corpus" / "_".join(item.api)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / hashlib.sha256(seed).hexdigest()[:16]).write_bytes(seed)
            written += 1
    print(f"{written} seeds under fuzz/corpus/")


if __name__ == "__main__":
    main()
