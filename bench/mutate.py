"""Mutation testing of the rule modules (docs/reliability.md "Mutation score").

    .venv/bin/python bench/mutate.py [--max N] [--seed S] [--only MODULE ...] [--list]

Each target is a rule module (and, for large ones, the functions that hold the rule) with the
test files that state its rules. A *mutant* is the module with one small change to its syntax
tree: a comparison flipped (``<`` / ``<=``, ``==`` / ``!=``, ``in`` / ``not in``), an arithmetic
operator swapped (``+`` / ``-``, ``*`` / ``//``), ``and`` / ``or``, a ``not`` dropped, an ``if``
condition negated, an integer moved by one, a boolean flipped, or a closed-set code (an outcome,
a failure class) replaced by another. Each mutant is written into a temporary ``git worktree`` of
HEAD (the shared tree is never touched) and the target's tests run there; a mutant is *killed*
when they fail (or time out) and *survives* when they pass. The score is killed / tried.

Up to ``--max`` mutants per target are tried (all with ``--max 0``), drawn with ``--seed`` from
every mutation site, so a run is repeatable. Survivors are printed with their line and change.
"""

import argparse
import ast
import copy
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

# module -> (path, functions to mutate or None for every function, test files). A survivor of
# those is tried once more against WIDER[module], slower tests of the same rules, when given.
TARGETS = {
    "pricing": ("llm_accounts/pricing.py",
                ("settlement_cost", "quote", "_cache_writes", "_request_ttls", "_count", "rates_for", "_check_modifiers"),
                ("tests/test_pricing.py",)),
    "classify": ("llm_accounts/classify.py", None, ("tests/test_classify.py", "tests/test_outcomes.py")),
    "routing": ("llm_accounts/routing.py", ("refused", "completed"),
                ("tests/test_outcomes.py", "tests/test_rule_guards.py")),
    "clock": ("llm_accounts/clock.py", None, ("tests/test_money_and_months.py",)),
    "scrub": ("llm_accounts/scrub.py", None, ("tests/test_scrub.py",)),
    "selection": ("llm_accounts/selection.py",
                  ("fits", "within_warm_bound", "compare_utilization", "compare", "order", "budget_refusal", "verdict",
                   "_no_room", "spent_nusd", "_limits", "_no_token_room", "fits_spent", "ahead"),
                  ("tests/test_selection.py", "tests/test_ledger.py")),
    "ledger": ("llm_accounts/ledger.py", ("_reserve", "_verdict", "_select", "_admit", "_settle"),
               ("tests/test_ledger.py", "tests/test_ledger_edges.py")),
}

WIDER = {
    "routing": ("tests/test_retries.py",),
    "classify": ("tests/test_health.py", "tests/test_rule_guards.py"),
    "selection": ("tests/test_rule_guards.py", "tests/test_client_caps.py", "tests/test_client_token_caps.py",
                  "tests/test_health.py", "tests/test_ledger_edges.py", "tests/test_budget_wording.py",
                  "tests/test_waiting_for_room.py"),
    "clock": ("tests/test_rule_guards.py",),
    "scrub": ("tests/test_properties.py", "tests/test_stream_scrub_tools.py"),
    "ledger": ("tests/test_ledger_totals.py", "tests/test_health.py", "tests/test_ledger_health.py",
               "tests/test_client_caps.py", "tests/test_client_token_caps.py", "tests/test_warm_prefix_rules.py"),
}

CLOSED_SETS = [
    ("complete", "not_sent", "rate_limited", "overloaded", "auth_required", "request_rejected", "provider_error",
     "transport_error", "usage_incomplete", "stream_error", "stream_truncated", "cancelled", "stream_closed"),
    ("quota_exhausted", "rate_limited", "auth", "provider_outage", "model_unavailable", "transport", "semantic"),
    ("open", "settled"),
]
SWAPS = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
    ast.And: ast.Or, ast.Or: ast.And,
}


def _in_scope(tree, functions):
    """The nodes to mutate: inside the named functions (or every function), docstrings left out."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.add(id(first.value))
    scope = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (functions is None or node.name in functions):
            scope += [inner for inner in ast.walk(node) if id(inner) not in docstrings]
    seen, ordered = set(), []
    for node in scope:
        if id(node) not in seen:
            seen.add(id(node))
            ordered.append(node)
    return ordered


def _changes(node):
    """The mutations of one node, as (description, function applying it in place)."""
    out = []
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in SWAPS:
                def flip(n=node, i=i, new=SWAPS[type(op)]):
                    n.ops[i] = new()
                out.append((f"{type(op).__name__} -> {SWAPS[type(op)].__name__}", flip))
    elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in SWAPS:
        def swap(n=node, new=SWAPS[type(node.op)]):
            n.op = new()
        out.append((f"{type(node.op).__name__} -> {SWAPS[type(node.op)].__name__}", swap))
    elif isinstance(node, ast.BoolOp):
        def swap(n=node, new=SWAPS[type(node.op)]):
            n.op = new()
        out.append((f"{type(node.op).__name__} -> {SWAPS[type(node.op)].__name__}", swap))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        def drop(n=node):
            n.op = ast.UAdd()  # +x of a bool is its int: truthiness kept, the `not` gone
        out.append(("drop not", drop))
    elif isinstance(node, ast.If):
        def negate(n=node):
            n.test = ast.UnaryOp(op=ast.Not(), operand=n.test)
        out.append(("negate if", negate))
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            def flip(n=node):
                n.value = not n.value
            out.append((f"{value} -> {not value}", flip))
        elif isinstance(value, int) and abs(value) < 10**12:
            def bump(n=node):
                n.value = n.value + 1
            out.append((f"{value} -> {value + 1}", bump))
        elif isinstance(value, str):
            for members in CLOSED_SETS:
                if value in members:
                    other = members[(members.index(value) + 1) % len(members)]

                    def replace(n=node, other=other):
                        n.value = other
                    out.append((f"'{value}' -> '{other}'", replace))
                    break
    return out


def mutants(source, functions):
    """Every (line, description, mutated source) of ``source``."""
    tree = ast.parse(source)
    sites = []
    for index, node in enumerate(_in_scope(tree, functions)):
        for number, (description, _) in enumerate(_changes(node)):
            sites.append((index, number, getattr(node, "lineno", 0), description))
    for index, number, line, description in sites:
        copy_tree = copy.deepcopy(tree)
        node = _in_scope(copy_tree, functions)[index]
        _changes(node)[number][1]()
        ast.fix_missing_locations(copy_tree)
        try:
            mutated = ast.unparse(copy_tree)
            compile(mutated, "<mutant>", "exec")
        except (SyntaxError, ValueError):
            continue
        yield line, description, mutated


def run_tests(worktree, tests, timeout):
    env = {**os.environ, "PYTHONPATH": str(worktree), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider", "-m", "not load"],
            cwd=worktree, env=env, capture_output=True, text=True, timeout=timeout,
            # A shell's background job ignores SIGINT, and so would the tests' children, whose
            # Ctrl-C tests then fail: give them the default handling back.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    if result.returncode == 0:
        return "passed"
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    return "failed: " + (failed[0] if failed else result.stdout[-300:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=30, help="mutants per target (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", nargs="*", choices=sorted(TARGETS))
    parser.add_argument("--timeout", type=float, default=180)
    parser.add_argument("--list", action="store_true", help="count the mutation sites and stop")
    args = parser.parse_args(argv)
    targets = {name: TARGETS[name] for name in (args.only or TARGETS)}

    worktree = pathlib.Path(tempfile.mkdtemp(prefix="llm-accounts-mutate-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), "HEAD"],
                   check=True, capture_output=True)
    try:
        check = subprocess.run([sys.executable, "-c", "import llm_accounts; print(llm_accounts.__file__)"],
                               cwd=worktree, env={**os.environ, "PYTHONPATH": str(worktree)}, capture_output=True, text=True)
        if not check.stdout.strip().startswith(str(worktree)):
            raise SystemExit("the worktree's llm_accounts is not the one imported; refusing to mutate")
        summary = []
        for name, (path, functions, tests) in targets.items():
            tests = [test for test in tests if (worktree / test).exists()]
            source = (worktree / path).read_text()
            every = list(mutants(source, functions))
            chosen = every if args.max == 0 else random.Random(f"{args.seed}:{name}").sample(every, min(args.max, len(every)))
            chosen.sort(key=lambda item: item[0])
            if args.list:
                print(f"{name}: {len(every)} mutants")
                continue
            baseline = [run_tests(worktree, tests, args.timeout) for _ in range(1)]
            while baseline[-1] != "passed" and len(baseline) < 3:  # a test that fails now and then
                baseline.append(run_tests(worktree, tests, args.timeout))
            if baseline[-1] != "passed":
                raise SystemExit(f"{name}: its tests fail without any mutation: {baseline[-1]}")
            if len(baseline) > 1:
                print(f"  {name}: the unmutated tests failed {len(baseline) - 1} time(s) before passing: {baseline[0]}")
            survivors, started = [], time.time()
            for line, description, mutated in chosen:
                (worktree / path).write_text(mutated)
                try:
                    verdict = run_tests(worktree, tests, args.timeout)
                    if verdict == "passed" and WIDER.get(name):
                        verdict = run_tests(worktree, [t for t in WIDER[name] if (worktree / t).exists()], args.timeout)
                        if verdict != "passed":
                            print(f"  killed by the wider tests: {path}:{line} {description}", flush=True)
                finally:
                    (worktree / path).write_text(source)
                if verdict == "passed":
                    survivors.append((line, description))
                    print(f"  survived: {path}:{line} {description}", flush=True)
            killed = len(chosen) - len(survivors)
            score = killed / len(chosen) if chosen else 1.0
            summary.append((name, len(every), len(chosen), killed, score, survivors))
            print(f"{name}: {killed}/{len(chosen)} killed ({score:.0%}) of {len(every)} sites, "
                  f"{time.time() - started:.0f} s; tests: {' '.join(tests)}", flush=True)
        if summary:
            print("\nmodule      sites  tried  killed  score")
            for name, every, tried, killed, score, _ in summary:
                print(f"{name:<11} {every:>5}  {tried:>5}  {killed:>6}  {score:>5.0%}")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], capture_output=True)
        shutil.rmtree(worktree.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
