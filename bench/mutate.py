"""Mutation testing of the rule modules (docs/reliability.md "Mutation score").

    .venv/bin/python bench/mutate.py [--max N] [--seed S] [--only MODULE ...] [--kind REGEX] [--list]

Each target is a rule module (and, for large ones, the functions that hold the rule) with the
test files that state its rules. A *mutant* is the module with one small change to its syntax
tree: a comparison flipped (``<`` / ``<=``, ``==`` / ``!=``, ``in`` / ``not in``), an arithmetic
operator swapped (``+`` / ``-``, ``*`` / ``//``), ``and`` / ``or``, one operand of an ``and`` or
``or`` dropped, a ``not`` dropped, an ``if`` condition negated, an integer moved by one, a boolean
flipped (a keyword such as ``follow_redirects=False`` included), a closed-set code (an outcome, a
failure class) replaced by another, a class in an ``isinstance`` test widened to its base class
(``httpx.ConnectTimeout`` to ``httpx.TimeoutException``), one condition of a SQL ``WHERE``
dropped (``scope_kind = ?3 AND``), or one element of a tuple, list or set dropped
(``(a.key_env, a.admin_key_env)`` to ``(a.key_env,)``). A target names the functions to mutate and, when it needs
them, module-level constants (``REFUSED_OUTCOMES``). Each mutant is written into a temporary ``git worktree`` of
HEAD (the shared tree is never touched) and the target's tests run there; a mutant is *killed*
when they fail (or time out) and *survives* when they pass. The score is killed / tried.

Up to ``--max`` mutants per target are tried (all with ``--max 0``), drawn with ``--seed`` from
every mutation site, so a run is repeatable; ``--kind`` keeps only the changes whose description
matches (``--kind 'SQL|operand|isinstance'`` for the kinds added last). Survivors are printed
with their line and change.
"""

import argparse
import ast
import builtins
import copy
import importlib
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent

# module -> (path, functions (and module-level constants) to mutate or None for every function,
# test files). A survivor of those is tried once more against WIDER[module], slower tests of the
# same rules, when given.
TARGETS = {
    "pricing": ("llm_accounts/pricing/prices.py",
                ("settlement_cost", "quote", "_cache_writes", "_request_ttls", "_marked_ttls", "_count", "rates_for", "_check_modifiers"),
                ("tests/test_pricing.py",)),
    "classify": ("llm_accounts/wire/classify.py", None, ("tests/test_classify.py", "tests/test_outcomes.py")),
    "routing": ("llm_accounts/routing.py", ("refused", "completed"),
                ("tests/test_outcomes.py", "tests/test_rule_guards.py", "tests/test_mutation_guards.py")),
    # Where a key may be sent and what a failed connection proves (docs/security.md "Sending a
    # key", docs/architecture.md "Failover").
    "transport": ("llm_accounts/wire/transport.py", ("base_url", "_is_loopback", "client", "async_client", "describe_failure"),
                  ("tests/test_mutation_guards.py",)),
    # The ledger's own checks on evidence: its second line of defence behind routing.
    "records": ("llm_accounts/records.py", ("check_evidence", "REFUSED_OUTCOMES", "UNKNOWN_OUTCOMES"),
                ("tests/test_mutation_guards.py", "tests/test_ledger.py")),
    "clock": ("llm_accounts/clock.py", None, ("tests/test_money_and_months.py",)),
    "scrub": ("llm_accounts/wire/scrub.py", None, ("tests/test_scrub.py",)),
    "selection": ("llm_accounts/selection.py",
                  ("fits", "within_warm_bound", "compare_utilization", "compare", "order", "budget_refusal", "verdict",
                   "_no_room", "spent_nusd", "_limits", "_no_token_room", "fits_spent", "ahead"),
                  ("tests/test_selection.py", "tests/test_ledger.py", "tests/test_waiting_rules.py")),
    "admission": ("llm_accounts/ledger/admission.py",
                  ("reserve", "choose", "account_verdict", "select", "WAITER_TTL", "_waiters", "_queue"),
                  ("tests/test_ledger.py", "tests/test_ledger_edges.py", "tests/test_mutation_guards.py",
                   "tests/test_recheck_races.py", "tests/test_waiting_rules.py", "tests/test_mutation_survivors.py")),
    # The admission's write and its re-check under the account's lock (docs/architecture.md "Ledger").
    "recheck": ("llm_accounts/ledger/recheck.py", ("Sql", "limit_sql", "condition", "admit", "_probe_free"),
                ("tests/test_recheck_properties.py", "tests/test_recheck_races.py", "tests/test_ledger.py",
                 "tests/test_mutation_survivors.py")),
    # Server tools' bounds: the loop limit, max_uses, fees (docs/pricing.md "Server tools").
    "tool_bounds": ("llm_accounts/pricing/tool_bounds.py", ("ITERATIONS", "COUNTS", "is_server_tool", "bounds", "fees_due", "overrun"),
                    ("tests/test_server_tools.py",)),
    # Which revision prices each model (docs/pricing.md "Which price wins").
    "price_book": ("llm_accounts/pricing/price_book.py", None, ("tests/test_user_prices.py", "tests/test_user_price_rules.py")),
    # What a user price file may do, which files are read, and the key runs add checks.
    "user_prices": ("llm_accounts/pricing/user_prices.py",
                    ("check_against_shipped", "shipped_replacements", "load_user_revisions", "read_candidate",
                     "_file_strings", "strings"),
                    ("tests/test_user_prices.py", "tests/test_user_price_rules.py", "tests/test_secret_runs.py",
                     "tests/test_mutation_survivors.py")),
    # Whether the process that reserved an attempt is gone (docs/architecture.md "A process that is gone").
    "liveness": ("llm_accounts/liveness.py", ("gone", "_started", "ran_in", "this_process"),
                 ("tests/test_process_gone.py",)),
    "settlement": ("llm_accounts/ledger/settlement.py", ("settle",),
                   ("tests/test_ledger.py", "tests/test_ledger_edges.py", "tests/test_mutation_guards.py")),
}

WIDER = {
    "routing": ("tests/test_retries.py",),
    "transport": ("tests/test_routed.py", "tests/test_secrets_reach.py"),
    "records": ("tests/test_ledger_edges.py", "tests/test_outcomes.py", "tests/test_rule_guards.py"),
    "classify": ("tests/test_health.py", "tests/test_rule_guards.py"),
    "selection": ("tests/test_rule_guards.py", "tests/test_client_caps.py", "tests/test_client_token_caps.py",
                  "tests/test_health.py", "tests/test_ledger_edges.py", "tests/test_budget_wording.py",
                  "tests/test_waiting_for_room.py", "tests/test_ledger_health.py"),
    "clock": ("tests/test_rule_guards.py",),
    "scrub": ("tests/test_properties.py", "tests/test_stream_scrub_tools.py"),
    "recheck": ("tests/test_ledger_postgres_accounts.py", "tests/test_waiting_for_room.py", "tests/test_client_caps.py",
                "tests/test_warm_prefix_status.py"),
    "admission": ("tests/test_ledger_totals.py", "tests/test_health.py", "tests/test_ledger_health.py",
                  "tests/test_client_caps.py", "tests/test_client_token_caps.py", "tests/test_warm_prefix_rules.py"),
    "settlement": ("tests/test_ledger_totals.py", "tests/test_health.py", "tests/test_ledger_health.py",
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
        # A named class stands for every method in it (recheck's ``Sql``).
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (functions is None or node.name in functions) \
                or isinstance(node, ast.ClassDef) and functions is not None and node.name in functions:
            scope += [inner for inner in ast.walk(node) if id(inner) not in docstrings]
    for node in tree.body:  # module-level constants named in the target
        names = [t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)]
        if functions is not None and isinstance(node, (ast.Assign, ast.AnnAssign)) and set(names) & set(functions):
            scope += list(ast.walk(node))
    seen, ordered = set(), []
    for node in scope:
        if id(node) not in seen:
            seen.add(id(node))
            ordered.append(node)
    return ordered


def _defined(tree):
    """The names a target may list: functions and classes anywhere, module-level constants."""
    names = {node.name for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            names |= {t.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(t, ast.Name)}
    return names


def check_targets(targets, root=ROOT):
    """Every target's module, names and test files exist, or a SystemExit saying which do not: a
    module moved or a function renamed must not quietly leave a rule unmutated."""
    problems = []
    for name, (path, functions, tests) in targets.items():
        module = root / path
        if not module.is_file():
            problems.append(f"{name}: no module {path}")
        else:
            missing = sorted(set(functions or ()) - _defined(ast.parse(module.read_text())))
            if missing:
                problems.append(f"{name}: {path} defines no {', '.join(missing)}")
        for test in (*tests, *WIDER.get(name, ())):
            if not (root / test).is_file():
                problems.append(f"{name}: no test file {test}")
    if problems:
        raise SystemExit("bench/mutate.py targets do not match the tree:\n  " + "\n  ".join(problems))


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
        for i in range(len(node.values)):
            # One condition of a rule forgotten: `http and loopback` becomes `http`.
            def drop_operand(n=node, i=i):
                n.values.pop(i)
                if len(n.values) == 1:
                    n.op, n.values = ast.And(), n.values * 2  # `x and x`: the operand alone
            out.append((f"{type(node.op).__name__} operand {i + 1} dropped", drop_operand))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
            and len(node.args) == 2:
        classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
        for i, cls in enumerate(classes):
            base = _base_class(cls)
            if base is None:
                continue

            def widen(n=node, i=i, base=base):
                holder = n.args[1].elts if isinstance(n.args[1], ast.Tuple) else None
                target = holder[i] if holder is not None else n.args[1]
                if isinstance(target, ast.Attribute):
                    target.attr = base
                else:
                    target.id = base
            out.append((f"isinstance {ast.unparse(cls)} -> its base {base}", widen))
    elif isinstance(node, (ast.Tuple, ast.Set, ast.List)) and isinstance(getattr(node, "ctx", ast.Load()), ast.Load) \
            and 2 <= len(node.elts) <= 12:
        for i, element in enumerate(node.elts):
            # One member of a listed set forgotten: the admin key left out of the keys a file is
            # checked against, the zombie state left out of the states of a process that is gone.
            def drop_element(n=node, i=i):
                n.elts.pop(i)
            out.append((f"element {ast.unparse(element)[:40]} dropped", drop_element))
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
        elif isinstance(value, str) and "WHERE" in value:
            for dropped, mutated in _sql_conditions_dropped(value):
                def drop_condition(n=node, mutated=mutated):
                    n.value = mutated
                out.append((f"SQL condition dropped: {dropped}", drop_condition))
        elif isinstance(value, str):
            for members in CLOSED_SETS:
                if value in members:
                    other = members[(members.index(value) + 1) % len(members)]

                    def replace(n=node, other=other):
                        n.value = other
                    out.append((f"'{value}' -> '{other}'", replace))
                    break
    return out


def _base_class(node):
    """The name of the direct base class of ``module.Class`` or a builtin class, when the same
    module exposes it (and it is not ``object``); else None."""
    try:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = importlib.import_module(node.value.id)
            cls = getattr(module, node.attr)
        elif isinstance(node, ast.Name):
            module, cls = builtins, getattr(builtins, node.id)
        else:
            return None
    except (ImportError, AttributeError):
        return None
    if not isinstance(cls, type) or len(cls.__mro__) < 2 or cls.__mro__[1] is object:
        return None
    base = cls.__mro__[1]
    return base.__name__ if getattr(module, base.__name__, None) is base else None


# One condition of a SQL WHERE or ON clause: `column = ?3`, `a.b = :name`, `x = 'text'`, `x = y`.
_SQL_TERM = r"[A-Za-z_][\w.]*\s*=\s*(?:\?\d*|:\w+|'[^']*'|[A-Za-z_][\w.]*)"


def _sql_conditions_dropped(sql):
    """(condition, SQL without it) for each condition joined to another by AND."""
    seen = {}
    for pattern in (rf"(?<=WHERE )({_SQL_TERM})\s+AND\s+", rf"(?<=AND )({_SQL_TERM})\s+AND\s+",
                    rf"\s+AND\s+({_SQL_TERM})"):
        for match in re.finditer(pattern, sql):
            mutated = sql[: match.start()] + sql[match.end():]
            seen.setdefault(mutated, " ".join(match.group(1).split()))
    return [(dropped, mutated) for mutated, dropped in seen.items()]


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
    parser.add_argument("--kind", help="only changes whose description matches this regular expression")
    parser.add_argument("--list", action="store_true", help="count the mutation sites and stop")
    args = parser.parse_args(argv)
    targets = {name: TARGETS[name] for name in (args.only or TARGETS)}
    check_targets(targets)

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
            source = (worktree / path).read_text()
            every = [m for m in mutants(source, functions) if args.kind is None or re.search(args.kind, m[1])]
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
                        verdict = run_tests(worktree, list(WIDER[name]), args.timeout)
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
