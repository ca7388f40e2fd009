"""Qrels and runs from elsewhere never change a number silently: a byte-order mark does not rename the first query,
a JSON key given twice, a grade or score that Python would read loosely ('1_0' as 10), one too large for a float,
bytes that are not UTF-8 and JSON nested a hundred thousand deep are errors that name the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from beyondlabels.io.qrels import load_qrels, load_run

BOM = "\ufeff"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_trec_qrels_file_with_a_byte_order_mark_keeps_its_first_query(tmp_path: Path):
    qrels = load_qrels(_write(tmp_path / "q.txt", BOM + "301 0 d1 1\n301 0 d2 0\n302 0 d1 2\n"))
    assert qrels == {"301": {"d1": 1, "d2": 0}, "302": {"d1": 2}}


def test_a_trec_run_with_a_byte_order_mark_keeps_its_first_query(tmp_path: Path):
    run = load_run(_write(tmp_path / "r.txt", BOM + "301 Q0 d1 1 2.5 tag\n301 Q0 d2 2 1.5 tag\n"))
    assert run == {"301": {"d1": 2.5, "d2": 1.5}}


def test_json_qrels_and_runs_with_a_byte_order_mark_are_read(tmp_path: Path):
    assert load_qrels(_write(tmp_path / "q.json", BOM + '{"1": {"a": 1}}')) == {"1": {"a": 1}}
    assert load_run(_write(tmp_path / "r.json", BOM + '{"1": ["a", "b"]}')) == {"1": ["a", "b"]}


@pytest.mark.parametrize("text", ['{"1": {"a": 1, "a": 0}}', '{"1": {"a": 1}, "1": {"b": 1}}'])
def test_a_json_key_given_twice_is_an_error(tmp_path: Path, text):
    with pytest.raises(ValueError, match=r"q\.json.*appears twice"):
        load_qrels(_write(tmp_path / "q.json", text))
    with pytest.raises(ValueError, match=r"r\.json.*appears twice"):
        load_run(_write(tmp_path / "r.json", text.replace("1}", "0.5}").replace("0}", "0.5}")))


@pytest.mark.parametrize("grade", ["1_0", "1e1", "0x1", "١", "+1_0", "1.5", "nan", " "])
def test_a_grade_written_loosely_is_an_error_not_another_number(tmp_path: Path, grade):
    with pytest.raises(ValueError, match=r"q\.txt:1.*grade"):
        load_qrels(_write(tmp_path / "q.txt", f"301 0 d1 {grade}\n"))
    with pytest.raises(ValueError, match=r"q\.json.*grade"):
        load_qrels(_write(tmp_path / "q.json", f'{{"1": {{"a": "{grade}"}}}}'))


@pytest.mark.parametrize("grade, value", [("2", 2), ("-1", -1), ("+3", 3), ("1.0", 1), ("0", 0)])
def test_plain_integer_grades_are_read(tmp_path: Path, grade, value):
    assert load_qrels(_write(tmp_path / "q.txt", f"301 0 d1 {grade}\n")) == {"301": {"d1": value}}


@pytest.mark.parametrize("score", ["1_0", "0x10", "1__0", "١"])
def test_a_score_written_loosely_is_an_error(tmp_path: Path, score):
    with pytest.raises(ValueError, match=r"r\.txt:1.*score"):
        load_run(_write(tmp_path / "r.txt", f"301 Q0 d1 1 {score} tag\n"))


@pytest.mark.parametrize("score, value", [("2.5", 2.5), ("-1e-3", -0.001), (".5", 0.5), ("3", 3.0), ("1E2", 100.0)])
def test_decimal_scores_are_read(tmp_path: Path, score, value):
    assert load_run(_write(tmp_path / "r.txt", f"301 Q0 d1 1 {score} tag\n")) == {"301": {"d1": value}}


def test_a_grade_too_large_for_a_float_is_an_error(tmp_path: Path):
    with pytest.raises(ValueError, match=r"q\.json.*grade"):
        load_qrels(_write(tmp_path / "q.json", '{"1": {"a": 1' + "0" * 400 + "}}"))
    with pytest.raises(ValueError, match=r"q\.txt:1.*grade"):
        load_qrels(_write(tmp_path / "q.txt", "301 0 d1 1" + "0" * 400 + "\n"))


def test_bytes_that_are_not_utf8_name_the_file(tmp_path: Path):
    (tmp_path / "q.txt").write_bytes(b"301 0 d\xff 1\n")
    with pytest.raises(ValueError, match=r"q\.txt.*UTF-8"):
        load_qrels(tmp_path / "q.txt")
    (tmp_path / "r.txt").write_bytes(b"301 Q0 d\xff 1 1.0 t\n")
    with pytest.raises(ValueError, match=r"r\.txt.*UTF-8"):
        load_run(tmp_path / "r.txt")


def test_json_nested_a_hundred_thousand_deep_is_an_error(tmp_path: Path):
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match=r"q\.json.*nested"):
        load_qrels(_write(tmp_path / "q.json", '{"1": ' + deep + "}"))
    with pytest.raises(ValueError, match=r"r\.json.*nested"):
        load_run(_write(tmp_path / "r.json", deep))


def test_a_ranked_document_that_is_not_an_id_is_an_error(tmp_path: Path):
    with pytest.raises(ValueError, match=r"r\.json.*document"):
        load_run(_write(tmp_path / "r.json", '{"1": ["a", ["b"]]}'))
