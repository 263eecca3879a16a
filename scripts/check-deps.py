#!/usr/bin/env python3
"""Checks that the code keeps the layering docs/architecture.md declares.

The table under "## Allowed dependencies" in docs/architecture.md is the one
source: a row per library target, with its folder under src/, its kind
("pure" cores or "shell"), the atrium_* targets it may use directly and the
external libraries it may link. A target may use what its row names and,
through them, everything they may use (the closure). This script rejects:

  * an #include "folder/file.h" in src/ (.h and .cc) that reaches a target
    outside the including file's target and its closure;
  * a target_link_libraries of an atrium_* target, in src/*/CMakeLists.txt,
    to an atrium_* target outside its closure, or to an external library
    its row does not name;
  * for pure cores: a database, network, TLS or thread library, in the row,
    in the link, or as a system #include (see BANNED_* below);
  * a table that names an unknown target, misses one CMake defines, or has a
    cycle.

A file belongs to the target whose add_library lists it; a header to the
target of the .cc with its name, else to atrium_<folder>. Each error names
the file and line, the offending edge and the table row it breaks.

Usage: scripts/check-deps.py [--root DIR]   check the tree (exit 1 on errors)
       scripts/check-deps.py --self-test    show that each rule can fail
Python 3 standard library only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

TABLE_DOC = "docs/architecture.md"
TABLE_HEADING = "## Allowed dependencies"

# What no pure core links or includes: a database, a network stack, TLS or
# a thread library (the cores take time and I/O from their shells).
BANNED_LINKS = re.compile(r"^(SQLite|PostgreSQL|Boost|OpenSSL|Threads)::", re.IGNORECASE)
# (Boost's CRC and inet_pton's address parsing are pure; its networking is not.)
BANNED_SYSTEM_INCLUDES = re.compile(
    r"^(boost/(asio|beast|thread)|sqlite3\.h$|libpq-fe\.h$|openssl/|thread$|pthread\.h$|sys/socket\.h$)")

LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE", "LINK_INTERFACE_LIBRARIES"}


class Row:
    def __init__(self, target, folder, kind, uses, externals, line, text):
        self.target, self.folder, self.kind = target, folder, kind
        self.uses, self.externals = uses, externals
        self.line, self.text = line, text

    def cite(self):
        return f"table row ({TABLE_DOC}:{self.line}): {self.text.strip()}"


def split_list(cell):
    cell = cell.replace("`", "").strip()
    if cell in ("", "-", "—", "none"):
        return []
    return [item for item in re.split(r"[,\s]+", cell) if item]


def parse_table(root, errors):
    path = os.path.join(root, TABLE_DOC)
    rows = {}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        errors.append(f"{TABLE_DOC}: cannot read the dependency table: {e}")
        return rows
    in_section = False
    for number, line in enumerate(lines, 1):
        if line.startswith("## "):
            in_section = line.strip() == TABLE_HEADING
            continue
        if not in_section or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5:
            errors.append(f"{TABLE_DOC}:{number}: a table row has 5 cells "
                          f"(target | folder | kind | may use | external libraries): {line}")
            continue
        target = cells[0].replace("`", "")
        if target.lower() == "target" or set(target) <= set("-: "):
            continue  # header or separator
        kind = cells[2].replace("`", "").lower()
        if kind not in ("pure", "shell"):
            errors.append(f"{TABLE_DOC}:{number}: kind of {target} is 'pure' or 'shell', not '{cells[2]}'")
        if target in rows:
            errors.append(f"{TABLE_DOC}:{number}: {target} has two rows")
        rows[target] = Row(target, cells[1].replace("`", ""), kind, split_list(cells[3]),
                           split_list(cells[4]), number, line)
    if not rows:
        errors.append(f"{TABLE_DOC}: no table under '{TABLE_HEADING}'")
    return rows


def closures(rows, errors):
    """Each target's allowed set (what it may use, transitively); reports cycles."""
    result = {}
    for target, row in rows.items():
        for used in row.uses:
            if used not in rows:
                errors.append(f"{TABLE_DOC}:{row.line}: {target} may use {used}, which has no row")
    state = {}

    def visit(target, path):
        if state.get(target) == "done":
            return result[target]
        if state.get(target) == "active":
            cycle = path[path.index(target):] + [target]
            errors.append(f"{TABLE_DOC}:{rows[target].line}: the table has a cycle: {' -> '.join(cycle)}")
            return set()
        state[target] = "active"
        allowed = set()
        for used in rows[target].uses:
            if used in rows:
                allowed.add(used)
                allowed |= visit(used, path + [target])
        state[target] = "done"
        result[target] = allowed
        return allowed

    for target in rows:
        visit(target, [])
    return result


def strip_cmake_comments(text):
    return "\n".join(re.sub(r"#.*$", "", line) for line in text.split("\n"))


def parse_cmake(root):
    """Libraries and links declared in src/*/CMakeLists.txt."""
    libraries = {}  # target -> (folder, [sources], line)
    links = []  # (file, line, target, item)
    src = os.path.join(root, "src")
    for folder in sorted(os.listdir(src)):
        path = os.path.join(src, folder, "CMakeLists.txt")
        if not os.path.isfile(path):
            continue
        rel = os.path.relpath(path, root)
        text = strip_cmake_comments(open(path, encoding="utf-8").read())
        for m in re.finditer(r"\badd_library\s*\(\s*([\w-]+)([^)]*)\)", text, re.S):
            line = text.count("\n", 0, m.start()) + 1
            sources = [s for s in m.group(2).split() if s.endswith((".cc", ".h"))]
            libraries[m.group(1)] = (folder, sources, rel, line)
        for m in re.finditer(r"\btarget_link_libraries\s*\(\s*([\w-]+)([^)]*)\)", text, re.S):
            offset = m.start(2)
            for item in re.finditer(r"\S+", m.group(2)):
                if item.group(0) in LINK_KEYWORDS:
                    continue
                line = text.count("\n", 0, offset + item.start()) + 1
                links.append((rel, line, m.group(1), item.group(0)))
    return libraries, links


def owner_map(libraries):
    """src-relative file -> target, and folder -> default target."""
    owners, defaults = {}, {}
    for target, (folder, sources, _, _) in libraries.items():
        for source in sources:
            owners[f"{folder}/{source}"] = target
        if target == f"atrium_{folder}" or folder not in defaults:
            defaults[folder] = target
    return owners, defaults


def owner_of(path, owners, defaults):
    """The target a file under src/ (folder/name) belongs to, or None."""
    if path in owners:
        return owners[path]
    stem, ext = os.path.splitext(path)
    if ext == ".h" and stem + ".cc" in owners:
        return owners[stem + ".cc"]
    return defaults.get(path.split("/", 1)[0])


def check(root):
    errors = []
    rows = parse_table(root, errors)
    allowed = closures(rows, errors)
    libraries, links = parse_cmake(root)
    owners, defaults = owner_map(libraries)

    for target, (folder, _, rel, line) in libraries.items():
        if target not in rows:
            errors.append(f"{rel}:{line}: {target} has no row in the table under '{TABLE_HEADING}' in {TABLE_DOC}")
        elif rows[target].folder != folder:
            errors.append(f"{rel}:{line}: {target} is in src/{folder}, the table says src/{rows[target].folder}; "
                          f"{rows[target].cite()}")
    for target, row in rows.items():
        if target not in libraries:
            errors.append(f"{TABLE_DOC}:{row.line}: {target} is in the table but no src/*/CMakeLists.txt defines it")
        if row.kind == "pure":
            for external in row.externals:
                if BANNED_LINKS.match(external):
                    errors.append(f"{TABLE_DOC}:{row.line}: pure core {target} may not link {external}; {row.cite()}")
            for used in sorted(allowed.get(target, ())):
                for external in rows[used].externals:
                    if BANNED_LINKS.match(external):
                        errors.append(f"{TABLE_DOC}:{row.line}: pure core {target} reaches {external} "
                                      f"through {used}; {row.cite()}")

    for rel, line, target, item in links:
        row = rows.get(target)
        if row is None:
            continue  # reported above, or not an atrium library
        if item.startswith("atrium_"):
            if item != target and item not in allowed.get(target, set()):
                errors.append(f"{rel}:{line}: link {target} -> {item} is not allowed; {row.cite()}")
        elif item.startswith("$") or item.startswith("-"):
            continue
        elif row.kind == "pure" and BANNED_LINKS.match(item):
            errors.append(f"{rel}:{line}: pure core {target} links {item}; {row.cite()}")
        elif item not in row.externals:
            errors.append(f"{rel}:{line}: link {target} -> {item} (external) is not in its row; {row.cite()}")

    src = os.path.join(root, "src")
    folders = {f for f in os.listdir(src) if os.path.isdir(os.path.join(src, f))}
    include = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
    for folder in sorted(folders):
        for dirpath, _, names in os.walk(os.path.join(src, folder)):
            for name in sorted(names):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(dirpath, name)
                rel_src = os.path.relpath(path, src)
                rel = os.path.relpath(path, root)
                target = owner_of(rel_src, owners, defaults)
                row = rows.get(target)
                if row is None:
                    continue  # the folder's target is reported above
                for number, text in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    m = include.match(text)
                    if not m:
                        continue
                    header = m.group(2)
                    if m.group(1) == "<":
                        if row.kind == "pure" and BANNED_SYSTEM_INCLUDES.match(header):
                            errors.append(f"{rel}:{number}: pure core {target} includes <{header}>; {row.cite()}")
                        continue
                    top = header.split("/", 1)[0]
                    if "/" not in header or top not in folders:
                        continue
                    used = owner_of(header, owners, defaults)
                    if used is None or used == target:
                        continue
                    if used not in allowed.get(target, set()):
                        errors.append(f'{rel}:{number}: {target} -> {used} (#include "{header}") '
                                      f"is not allowed; {row.cite()}")
    return errors


def run(root):
    errors = check(root)
    for error in errors:
        print(error)
    if errors:
        print(f"dependencies: {len(errors)} edge(s) break the table under '{TABLE_HEADING}' in {TABLE_DOC}")
        return 1
    print(f"dependencies: src/ keeps the table under '{TABLE_HEADING}' in {TABLE_DOC}")
    return 0


def self_test(root):
    """Copies src/ and the table to a temporary tree, checks that the copy
    passes, then breaks it one rule at a time and requires the error."""
    cases = [
        ("an include from a pure core into the store",
         "src/gateway/policy.h", "#pragma once\n", '#pragma once\n#include "store/store.h"\n',
         'atrium_gateway -> atrium_store (#include "store/store.h") is not allowed'),
        ("an include from a .cc upward (audit into the store)",
         "src/audit/chain.cc", '#include "audit/chain.h"\n', '#include "audit/chain.h"\n#include "store/sql.h"\n',
         'atrium_audit -> atrium_store (#include "store/sql.h") is not allowed'),
        ("an include of identity's service from its core",
         "src/identity/roles.cc", '#include "identity/roles.h"\n',
         '#include "identity/roles.h"\n#include "identity/identity_service.h"\n',
         "atrium_identity_core -> atrium_identity"),
        ("a CMake link between atrium targets the table does not allow",
         "src/gateway/CMakeLists.txt", "atrium_identity_core", "atrium_identity",
         "link atrium_gateway -> atrium_identity is not allowed"),
        ("a thread library linked by a pure core",
         "src/common/CMakeLists.txt", "nlohmann_json::nlohmann_json)", "nlohmann_json::nlohmann_json Threads::Threads)",
         "pure core atrium_common links Threads::Threads"),
        ("a network header in a pure core",
         "src/scheduler/scheduler.cc", "\n", "\n#include <boost/asio.hpp>\n",
         "pure core atrium_scheduler includes <boost/asio.hpp>"),
        ("an external library missing from the row",
         "src/capacity/CMakeLists.txt", "PUBLIC atrium_common", "PUBLIC atrium_common spdlog::spdlog",
         "link atrium_capacity -> spdlog::spdlog (external) is not in its row"),
        ("a library with no row",
         "src/model/CMakeLists.txt", "add_library(atrium_model INTERFACE)",
         "add_library(atrium_model INTERFACE)\nadd_library(atrium_model_extra INTERFACE)",
         "atrium_model_extra has no row"),
        ("a cycle in the table",
         TABLE_DOC, "| `atrium_model` | model | pure | — |", "| `atrium_model` | model | pure | `atrium_audit` |",
         "the table has a cycle"),
    ]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="atrium-deps.") as tmp:
        def fresh():
            work = os.path.join(tmp, "tree")
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(os.path.join(root, "src"), os.path.join(work, "src"))
            os.makedirs(os.path.join(work, "docs"))
            shutil.copy(os.path.join(root, TABLE_DOC), os.path.join(work, TABLE_DOC))
            return work

        work = fresh()
        errors = check(work)
        if errors:
            print("self-test: the unmodified tree should pass, got:\n  " + "\n  ".join(errors))
            failures += 1
        for what, rel, old, new, expected in cases:
            work = fresh()
            path = os.path.join(work, rel)
            text = open(path, encoding="utf-8").read()
            if old not in text:
                print(f"self-test: cannot set up '{what}': '{old.strip()}' is not in {rel}")
                failures += 1
                continue
            open(path, "w", encoding="utf-8").write(text.replace(old, new, 1))
            errors = check(work)
            hits = [e for e in errors if expected in e]
            if not hits:
                print(f"self-test: {what}: expected an error containing '{expected}', got {errors or 'none'}")
                failures += 1
            elif "table row (" not in hits[0] and not any(w in expected for w in ("no row", "cycle")):
                print(f"self-test: {what}: the error does not cite the table row: {hits[0]}")
                failures += 1
            else:
                print(f"self-test: {what}: rejected: {hits[0]}")
        # The command line fails too (exit status 1), not only the function.
        work = fresh()
        path = os.path.join(work, cases[0][1])
        open(path, "a", encoding="utf-8").write('#include "store/store.h"\n')
        status = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", work],
                                stdout=subprocess.DEVNULL).returncode
        if status != 1:
            print(f"self-test: the command exits {status} on a forbidden include, not 1")
            failures += 1
    print(f"self-test: {len(cases) + 2 - failures} of {len(cases) + 2} passed")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    return self_test(root) if args.self_test else run(root)


if __name__ == "__main__":
    sys.exit(main())
