"""The result cache of `exchange proofs` (exchange.theory.cache) and the single coqc pass.

A hit gives exactly the statuses a check from scratch gives, without asking coqc; a
change to any input misses; a changed .v file is seen, also through the modules that
require it; the shortcuts of the single pass (theorems asked about together, answers
reused from the cache) fall back to asking one by one when they do not hold.
"""

from __future__ import annotations

import json
import shutil
import threading

import pytest

import exchange.theory.cache as cache_mod
from exchange.cli import main
from exchange.theory import coq
from exchange.theory.build import build_development
from exchange.theory.cache import CACHE_DIR, ResultCache, cache_dir
from exchange.theory.coq import CHECKED, CLOSED, FAILED, compile_proofs, default_proofs_dir
from exchange.theory.registry import THEOREMS, Theorem

A = "Lemma a : 1 = 1.\nProof. reflexivity. Qed.\n"
A_AXIOM = "Axiom cheat : 1 = 1.\nLemma a : 1 = 1.\nProof. exact cheat. Qed.\n"
B = "From Fake Require Import A.\nLemma b : 1 = 1.\nProof. exact a. Qed.\n"
C = "Lemma c : 2 = 2.\nProof. reflexivity. Qed.\n"
REGISTRY = {k: Theorem(name=f"Fake.{m}.{k}", statement=k, file=f"theories/{m}.v")
            for m, k in (("A", "a"), ("B", "b"), ("C", "c"))}


def _dev(path, **files):
    (path / "theories").mkdir(parents=True)
    for module, text in files.items():
        (path / "theories" / f"{module}.v").write_text(text)
    (path / "_CoqProject").write_text(
        "-Q theories Fake\n" + "".join(f"theories/{m}.v\n" for m in files))
    shutil.copy(default_proofs_dir() / "Makefile", path / "Makefile")
    return path


def _check(dev, **kwargs):
    return {s.key: s for s in compile_proofs(dev, theorems=REGISTRY, pin=False, **kwargs)}


@pytest.fixture
def coq_runs(monkeypatch):
    """The ``reused`` answers of every coqc run compile_proofs makes (a hit makes none)."""
    runs = []
    real = coq._run_coq

    def spy(*args, **kwargs):
        runs.append(dict(kwargs.get("reused") or {}))
        return real(*args, **kwargs)

    monkeypatch.setattr(coq, "_run_coq", spy)
    return runs


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
@pytest.mark.coq
def test_a_hit_gives_the_same_statuses_without_asking_coqc(coqc, tmp_path, coq_runs):
    dev = _dev(tmp_path, A=A_AXIOM, B=B, C=C)
    first = _check(dev)
    assert [s.status for s in first.values()] == [FAILED, FAILED, CHECKED]
    assert len(coq_runs) == 1
    assert _check(dev) == first and len(coq_runs) == 1  # the hit: no coqc run
    assert _check(dev, cache=False) == first and len(coq_runs) == 2


@pytest.mark.slow  # ~2-5 s: the fast tier stays under 3 minutes
@pytest.mark.coq
def test_a_changed_v_file_is_seen(coqc, tmp_path, coq_runs):
    dev = _dev(tmp_path, A=A, B=B, C=C)
    assert all(s.status == CHECKED for s in _check(dev).values())
    (dev / "theories" / "A.v").write_text(A_AXIOM)
    got = _check(dev)
    assert got["a"].status == FAILED and "cheat" in got["a"].detail
    # B.v is unchanged but requires A: its stored answer is not reused.
    assert got["b"].status == FAILED and "cheat" in got["b"].detail
    assert got["c"].status == CHECKED
    assert set(coq_runs[-1]) == {"Fake.C.c"}  # only the module A cannot affect is reused
    assert got == _check(dev, cache=False)
    # Back to the first sources: the first result again, from the cache.
    (dev / "theories" / "A.v").write_text(A)
    runs = len(coq_runs)
    assert all(s.status == CHECKED for s in _check(dev).values()) and len(coq_runs) == runs


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
@pytest.mark.coq
def test_untouched_modules_are_not_asked_again(coqc, tmp_path, coq_runs):
    dev = _dev(tmp_path, A=A_AXIOM, B=B, C=C)
    before = _check(dev)
    (dev / "theories" / "C.v").write_text(C + "Lemma c2 : 3 = 3.\nProof. reflexivity. Qed.\n")
    after = _check(dev)
    assert set(coq_runs[-1]) == {"Fake.A.a", "Fake.B.b"}
    assert after == before == _check(dev, cache=False)


@pytest.mark.coq
def test_cache_false_neither_reads_nor_writes(coqc, tmp_path):
    dev = _dev(tmp_path, A=A, B=B, C=C)
    fresh = _check(dev, cache=False)
    assert not (dev / CACHE_DIR).exists()
    # Plant an entry under the right key that says otherwise: a hit returns it verbatim,
    # cache=False does not look.
    store = ResultCache.open(dev, coqc)
    store.save_statuses(REGISTRY, False, [coq.TheoremStatus(k, s.name, FAILED, "planted")
                                          for k, s in fresh.items()])
    assert {s.detail for s in _check(dev).values()} == {"planted"}
    assert _check(dev, cache=False) == fresh


@pytest.mark.slow  # ~1-3 s: the fast tier stays under 3 minutes
@pytest.mark.coq
def test_nothing_is_stored_when_a_file_changes_under_the_check(coqc, tmp_path, monkeypatch):
    dev = _dev(tmp_path, A=A, B=B, C=C)
    real = coq._run_coq

    def edit_meanwhile(*args, **kwargs):
        result = real(*args, **kwargs)
        (dev / "theories" / "A.v").write_text(A_AXIOM)  # after make built A.v as it was
        return result

    monkeypatch.setattr(coq, "_run_coq", edit_meanwhile)
    assert all(s.status == CHECKED for s in _check(dev).values())
    assert not list(cache_dir(dev).glob("*.json"))
    monkeypatch.setattr(coq, "_run_coq", real)
    assert _check(dev)["a"].status == FAILED  # the edit is checked, not answered from the cache


@pytest.mark.coq
def test_a_malformed_entry_is_a_miss(coqc, tmp_path):
    dev = _dev(tmp_path, A=A, B=B, C=C)
    first = _check(dev)
    for entry in cache_dir(dev).glob("*.json"):
        entry.write_text("{not json")
    assert _check(dev) == first
    assert all(json.loads(e.read_text()) for e in cache_dir(dev).glob("*.json"))


@pytest.mark.slow  # ~5 s: a full coqc pass; the full suite (CI) runs it
def test_no_cache_flag_reaches_compile_proofs(monkeypatch, capsys):
    seen = []

    def fake(proofs_dir, cache=True, build=None):
        seen.append(cache)
        return [coq.TheoremStatus(k, t.name, CHECKED, CLOSED) for k, t in THEOREMS.items()]

    monkeypatch.setattr(coq, "compile_proofs", fake)
    assert main(["proofs"]) == 0 and main(["proofs", "--no-cache"]) == 0
    assert seen == [True, False]
    assert "--no-cache" in main_help(capsys)


def main_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["proofs", "--help"])
    return capsys.readouterr().out


# --- the shortcuts of the single pass fall back to asking one by one -------------------

@pytest.mark.coq
def test_a_group_that_is_not_closed_is_asked_again_in_parts(coqc, tmp_path):
    dev = _dev(tmp_path, A=A_AXIOM, B=B, C=C)
    assert _check(dev, cache=False)  # builds it
    names = [t.name for t in REGISTRY.values()] + ["Fake.C.missing"]
    flags = build_development(dev, coqc, spec=False).flags  # exchange proofs' own build
    alone = coq._run_coq(dev, names, coqc, pins=False, expect_closed=lambda n: False,
                         flags=flags)
    together = coq._run_coq(dev, names, coqc, pins=False, expect_closed=lambda n: True,
                            flags=flags)
    assert together.found == alone.found and together.pinned == alone.pinned == {}
    assert alone.found["Fake.A.a"] == ("A.cheat",) and alone.found["Fake.C.c"] == ()
    assert "Fake.C.missing" not in alone.found and "Fake.C.missing" in together.errors
    # Alone: one pass (the unresolved name is last). Together: the group of four stops at
    # the unresolved name and is asked again one by one (coq._SPLIT = 4 parts at most;
    # in halves it took three passes).
    assert alone.passes == 1 and together.passes == 2
    assert coq._SPLIT == 4 and [len(u.members) for u in coq._parts(
        coq._Unit("group", "0", tuple(map(str, range(9)))))] == [3, 3, 3]


@pytest.mark.coq
def test_a_group_allowed_some_axioms_is_split_only_when_it_prints_another(coqc, tmp_path):
    # The theorems over R are asked about together: an answer within their allow-list
    # gives every member that (upper-bound) list in one pass; any other is halved down
    # to exact single answers.
    dev = _dev(tmp_path, A=A_AXIOM, B=B, C=C)
    assert _check(dev, cache=False)
    names = [t.name for t in REGISTRY.values()]
    flags = build_development(dev, coqc, spec=False).flags
    alone = coq._run_coq(dev, names, coqc, pins=False, expect_closed=lambda n: False,
                         flags=flags)
    allowed = coq._run_coq(dev, names, coqc, pins=False, flags=flags,
                           expect_closed=lambda n: frozenset({"Fake.A.cheat"}))
    assert allowed.passes == 1
    assert allowed.found == {n: ("A.cheat",) for n in names}
    other = coq._run_coq(dev, names, coqc, pins=False, flags=flags,
                         expect_closed=lambda n: frozenset({"Fake.B.other"}))
    assert other.found == alone.found and other.passes > 1


@pytest.mark.coq
def test_reused_axioms_that_no_longer_print_the_same_are_asked_again(coqc, tmp_path):
    dev = _dev(tmp_path, A=A_AXIOM, B=B, C=C)
    assert _check(dev, cache=False)  # builds it
    names = [t.name for t in REGISTRY.values()]
    stale = {"Fake.A.a": ("Old.cheat",), "Fake.B.b": ("A.cheat",)}
    run = coq._run_coq(dev, names, coqc, pins=False, expect_closed=lambda n: True,
                       reused=stale, flags=build_development(dev, coqc, spec=False).flags)
    assert run.found == {"Fake.A.a": ("A.cheat",), "Fake.B.b": ("A.cheat",),
                         "Fake.C.c": ()}
    assert run.passes == 2


@pytest.mark.coq
def test_refused_pins_cost_at_most_three_passes(coqc, tmp_path):
    # A pin the kernel refuses stops coqc; resuming after each one cost a pass per
    # refused pin. After the first, the rest are predicted (the elaborator's answer)
    # and the ones predicted to fail asked with `Fail Definition`: four refused pins,
    # three passes (five before), and each verdict and message is the one asked alone.
    lemmas = "".join(f"Lemma c{k} : {k} = {k}.\nProof. reflexivity. Qed.\n" for k in range(1, 6))
    dev = _dev(tmp_path, A=A, C=lemmas)
    (dev / "spec").mkdir()
    (dev / "spec" / "Spec.v").write_text(
        "Definition a : Prop := 1 = 1.\n"
        + "".join(f"Definition c{k} : Prop := {k} = {0 if k != 3 else 3}.\n" for k in range(1, 6)))
    build = build_development(dev, coqc)
    assert build.ok, build.error
    names = ["Fake.A.a"] + [f"Fake.C.c{k}" for k in range(1, 6)]
    run = coq._run_coq(dev, names, coqc, pins=True, expect_closed=lambda n: True,
                       flags=build.flags, spec_module=build.spec_module)
    refused = {n for n, why in run.pinned.items() if why}
    assert refused == {"Fake.C.c1", "Fake.C.c2", "Fake.C.c4", "Fake.C.c5"}
    assert run.pinned["Fake.A.a"] == run.pinned["Fake.C.c3"] == ""
    assert all(f"\"C.{n[-2:]}\" has type" in run.pinned[n] for n in refused), run.pinned
    assert run.passes == 3
    for name in refused:  # the same verdict asked alone
        alone = coq._run_coq(dev, [name], coqc, pins=True, expect_closed=lambda n: True,
                             flags=build.flags, spec_module=build.spec_module)
        assert alone.pinned[name] and alone.passes == 1


# --- the key ---------------------------------------------------------------------------

def _key(dev, registry=REGISTRY, pin=True, coqc_id="The Coq Proof Assistant, version 8.16.1"):
    return ResultCache(dev, "coqc", coqc_id).statuses_key(registry, pin)


def test_every_input_is_in_the_key(tmp_path, monkeypatch):
    dev = _dev(tmp_path / "one", A=A, B=B, C=C)
    base = _key(dev)
    assert _key(dev) == base
    # The key is the content, not the folder: a copy shares its entries.
    assert _key(shutil.copytree(dev, tmp_path / "two")) == base
    changed = {}

    def edit(label, path, text):
        old = path.read_text() if path.exists() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        changed[label] = _key(dev)
        path.write_text(old) if old is not None else path.unlink()
        assert _key(dev) == base, label

    edit("a .v file", dev / "theories" / "A.v", A + "(* comment *)\n")
    edit("a new .v file", dev / "theories" / "sub" / "D.v", C)
    edit("_CoqProject", dev / "_CoqProject", "-R theories Fake\ntheories/A.v\n")
    edit("the reviewed record", dev / "spec" / "Spec.v", "Definition a : Prop := 1 = 1.\n")
    changed["registry"] = _key(dev, {**REGISTRY, "a": Theorem(name="Fake.A.a", statement="A")})
    changed["registry order"] = _key(dev, dict(reversed(REGISTRY.items())))
    changed["pin"] = _key(dev, pin=False)
    changed["coqc version"] = _key(dev, coqc_id="The Coq Proof Assistant, version 8.17.0")
    with monkeypatch.context() as m:
        m.setattr(cache_mod, "CHECKER_VERSION", cache_mod.CHECKER_VERSION + "+1")
        changed["checker version"] = _key(dev)
    with monkeypatch.context() as m:
        m.setenv("COQEXTRAFLAGS", "-type-in-type")
        changed["COQ* environment"] = _key(dev)
    # The build outputs and the cache itself are not inputs; nor are the Makefile and
    # make's hooks: the command builds with its own coqc calls, never make, and checks
    # the Makefile's pinned hash and the hooks' absence on every run, uncached.
    (dev / "Makefile").write_text("all:\n\ttrue\n")
    (dev / "Makefile.coq.local").write_text("COQMF_OTHERFLAGS += -noinit\n")
    (dev / "CoqMakefile.local").write_text("COQMF_OTHERFLAGS += -noinit\n")
    (dev / "theories" / "A.vo").write_bytes(b"compiled")
    (dev / CACHE_DIR).mkdir()
    (dev / CACHE_DIR / "x.v").write_text("not a source")
    assert _key(dev) == base
    same = [label for label, key in changed.items() if key == base]
    assert not same, same
    assert len(set(changed.values())) == len(changed)


def test_concurrent_writers_leave_whole_entries(tmp_path):
    store = ResultCache(_dev(tmp_path, A=A), "coqc", "coqc")
    bad = []

    def work(n):
        for i in range(40):
            store._write("statuses-x.json", {"writer": n, "i": i, "pad": "x" * 20000})
            data = store._read("statuses-x.json")
            if not (isinstance(data, dict) and len(data["pad"]) == 20000):
                bad.append(data)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
    assert sorted(p.name for p in store.dir.iterdir()) == [".gitignore", "statuses-x.json"]


def test_the_folder_keeps_the_newest_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_mod, "MAX_ENTRIES", 3)
    store = ResultCache(_dev(tmp_path, A=A), "coqc", "coqc")
    for i in range(5):
        store._write(f"statuses-{i}.json", {"i": i})
    assert {p.name for p in store.dir.glob("*.json")} <= {f"statuses-{i}.json" for i in range(5)}
    assert len(list(store.dir.glob("*.json"))) == 3 and store._read("statuses-4.json") == {"i": 4}


# --- the shortcuts the mutation suite relies on (coqchk's run, Coq's link values) -------

FAKE_CHECKER = """#!/bin/sh
case "$1" in --version) echo "fake checker 1"; exit 0;; -where) echo /nowhere; exit 0;; esac
echo run >> "{log}"
echo "CONTEXT SUMMARY"
"""


def test_coqchk_run_is_reused_only_for_the_same_vo_bytes(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from exchange.theory import development

    log = tmp_path / "runs.log"
    checker = tmp_path / "coqchk"
    checker.write_text(FAKE_CHECKER.format(log=log))
    checker.chmod(0o755)
    proofs, root = tmp_path / "proofs", tmp_path / "build"
    (root / "theories").mkdir(parents=True)
    proofs.mkdir()
    vo = root / "theories" / "A.vo"
    vo.write_bytes(b"compiled A")
    build = SimpleNamespace(root=root, modules=["Fake.A"], spec_module="")
    args = [str(checker), "-silent", "-o", "-Q", str(root / "theories"), "Fake", "-norec", "Fake.A"]

    def runs():
        return len(log.read_text().splitlines()) if log.exists() else 0

    assert development._coqchk_run(str(checker), args, proofs, build, cache=True)[0] == 0
    assert runs() == 1
    development._coqchk_run(str(checker), args, proofs, build, cache=True)
    assert runs() == 1  # same .vo bytes, same modules: reused
    vo.write_bytes(b"compiled A, changed")
    development._coqchk_run(str(checker), args, proofs, build, cache=True)
    assert runs() == 2  # one byte of what coqchk reads changed: checked again
    development._coqchk_run(str(checker), args + ["-norec", "Fake.B"], proofs, build, cache=True)
    assert runs() == 3  # another module list: checked again
    development._coqchk_run(str(checker), args, proofs, build, cache=False)
    assert runs() == 4  # without the cache (CI, --no-cache): always run


def test_link_values_are_keyed_by_sources_terms_and_ci(tmp_path, monkeypatch, coqc):
    from fractions import Fraction

    from exchange.theory import link

    monkeypatch.delenv("CI", raising=False)  # CI itself runs with CI=true: start from a developer's shell
    proofs = tmp_path / "proofs"
    _dev(proofs, A=A)
    terms = ["[1 # 2]"]
    assert link._cached_values(proofs, coqc, terms) is None
    link._store_values(proofs, coqc, terms, [[Fraction(1, 2)]])
    assert link._cached_values(proofs, coqc, terms) == [[Fraction(1, 2)]]
    assert link._cached_values(proofs, coqc, ["[1 # 3]"]) is None  # another term
    (proofs / "theories" / "A.v").write_text(A + "\n(* edited *)\n")
    assert link._cached_values(proofs, coqc, terms) is None  # a .v file changed
    (proofs / "theories" / "A.v").write_text(A)
    assert link._cached_values(proofs, coqc, terms) == [[Fraction(1, 2)]]
    monkeypatch.setenv("CI", "true")
    assert link._cached_values(proofs, coqc, terms) is None  # CI evaluates from clean


def test_tool_answers_are_remembered_per_binary_and_environment(tmp_path, monkeypatch):
    # coqc --version / -where are asked once per process, but a replaced binary (another
    # inode, size or mtime) or another COQ* environment asks again, and a failure is
    # never remembered.
    log = tmp_path / "asked.log"
    tool = tmp_path / "fakecoqc"
    script = '#!/bin/sh\necho asked >> "{log}"\n[ -e "{fail}" ] && exit 3\necho "{answer}"\n'
    fail = tmp_path / "fail"

    def install(answer):
        tool.unlink(missing_ok=True)
        tool.write_text(script.format(log=log, fail=fail, answer=answer))
        tool.chmod(0o755)

    def asked():
        return len(log.read_text().splitlines()) if log.exists() else 0

    install("one")
    assert cache_mod.tool_answer(str(tool), "-where") == "one" and asked() == 1
    assert cache_mod.tool_answer(str(tool), "-where") == "one" and asked() == 1
    install("two, longer")  # another file in its place
    assert cache_mod.tool_answer(str(tool), "-where") == "two, longer" and asked() == 2
    monkeypatch.setenv("COQLIB", str(tmp_path))
    assert cache_mod.tool_answer(str(tool), "-where") == "two, longer" and asked() == 3
    fail.touch()
    monkeypatch.setenv("COQLIB", str(tmp_path / "other"))
    assert cache_mod.tool_answer(str(tool), "-where") is None and asked() == 4
    assert cache_mod.tool_answer(str(tool), "-where") is None and asked() == 5
