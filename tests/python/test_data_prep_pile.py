"""Pile reader: the 17 domains, jsonl and jsonl.zst, and malformed lines counted and reported."""

import json
import subprocess
import sys

import pytest

from data_prep import DataPrepError
from data_prep.__main__ import main
from data_prep.fixtures import make_pile
from data_prep.pile import DOMAIN_KEYS, DOMAINS, SkipReport, count_domains, domain_key, read_pile


def test_seventeen_domains_of_appendix_b2():
    names = [n for n, _ in DOMAINS]
    assert len(names) == 17 == len(set(DOMAIN_KEYS))
    for n in ("Pile-CC", "PubMed Central", "ArXiv", "Github", "FreeLaw", "StackExchange",
              "USPTO Backgrounds", "PubMed Abstracts", "Gutenberg (PG-19)", "Wikipedia (en)",
              "DM Mathematics", "Ubuntu IRC", "EuroParl", "HackerNews", "PhilPapers",
              "NIH ExPorter", "Enron Emails"):
        assert domain_key(n) in DOMAIN_KEYS
    assert domain_key("Stack Exchange") == "stackexchange"
    assert domain_key("OpenWebText2") is None and domain_key("Books3") is None


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.zst"])
def test_domain_counts(tmp_path, suffix):
    path = make_pile(tmp_path / f"p{suffix}", docs_per_domain=2, domains=["pile_cc", "github", "arxiv"])
    report = SkipReport()
    stats = count_domains([path], report)
    assert set(stats) == set(DOMAIN_KEYS)
    assert {k: v["documents"] for k, v in stats.items() if v["documents"]} == {
        "pile_cc": 2, "github": 2, "arxiv": 2}
    assert report.accepted == 6 and report.skipped == 0
    docs = list(read_pile([path]))
    assert [d.line for d in docs] == [1, 2, 3, 4, 5, 6]


def _malformed(tmp_path):
    good = json.dumps({"text": "hello world", "meta": {"pile_set_name": "Github"}})
    lines = [
        good,                                                            # 1 ok
        "{not json",                                                     # 2 invalid JSON
        "",                                                              # 3 blank
        json.dumps({"meta": {"pile_set_name": "ArXiv"}}),                # 4 missing text
        json.dumps({"text": "x", "meta": {"pile_set_name": "Books3"}}),  # 5 outside the 17
        json.dumps({"text": "x", "meta": {}}),                           # 6 no pile_set_name
        json.dumps([1, 2]),                                              # 7 not an object
        "{also not json",                                                # 8 invalid JSON
        json.dumps({"text": 5, "meta": {"pile_set_name": "ArXiv"}}),     # 9 text not a string
        json.dumps({"text": "x", "meta": {"pile_set_name": "Books3"}}),  # 10 outside the 17
        good,                                                            # 11 ok
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"text": "\xff\xfe"}\n')  # 12 bad UTF-8
    return path


def test_malformed_lines_counted_per_reason(tmp_path):
    path = _malformed(tmp_path)
    report = SkipReport()
    docs = list(read_pile([path], report))
    assert [d.line for d in docs] == [1, 11]
    assert dict(report.counts) == {
        "invalid JSON": 2, "blank line": 1, "missing 'text'": 1,
        "pile_set_name not among the 17 domains": 2, "missing meta.pile_set_name": 1,
        "JSON value is not an object": 1, "'text' is not a string": 1, "invalid UTF-8": 1}
    assert report.examples["invalid JSON"] == ["bad.jsonl:2", "bad.jsonl:8"]
    assert report.other_set_names == {"Books3": 2}


def test_pile_stats_cli_prints_report(tmp_path, capsys):
    path = _malformed(tmp_path)
    assert main(["pile-stats", str(path)]) == 0
    out = capsys.readouterr()
    assert "Github" in out.out
    assert "read 12 lines: 2 accepted, 10 skipped" in out.err
    assert "skipped 2 (invalid JSON); first at bad.jsonl:2, bad.jsonl:8" in out.err
    assert "Books3=2" in out.err
    assert main(["pile-stats", "--strict", str(path)]) == 1


def test_missing_and_corrupt_files_one_error_line(tmp_path):
    with pytest.raises(DataPrepError, match="nope.jsonl"):
        list(read_pile([tmp_path / "nope.jsonl"]))
    bad = tmp_path / "bad.jsonl.zst"
    bad.write_bytes(b"this is not zstd at all" * 10)
    r = subprocess.run([sys.executable, "-m", "data_prep", "pile-stats", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "bad.jsonl.zst" in r.stderr and "error" in r.stderr


def test_help_of_every_command():
    for cmd in ([], ["pile-stats"], ["shards"], ["shard-info"], ["survey-inputs"], ["sft"], ["mini-corpus"]):
        r = subprocess.run([sys.executable, "-m", "data_prep", *cmd, "--help"], capture_output=True, text=True)
        assert r.returncode == 0 and "usage:" in r.stdout
