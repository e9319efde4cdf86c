#!/usr/bin/env python3
"""Migrations are additive: fails on any destructive statement in `migrations/*.sql`.

An older worker keeps running against a newer schema during a rollout and after a rollback
(docs/production.md, "Upgrades and migrations"), and every row of the exclusion proof is evidence
that must outlive the release that wrote it. So a migration may add (tables, columns, indexes,
constraints, functions, triggers, grants) but not take away. A statement is destructive when it

  drop                      drops an object or part of one (DROP ..., ALTER ... DROP ...,
                            DETACH PARTITION): its rows, or the guarantee it carried, are gone
  truncate                  empties a table
  delete                    deletes rows
  update                    rewrites existing rows
  alter-type                changes the type of a column or attribute (a rewrite; an older binary
                            may not read the new type)
  set-not-null              makes an existing column NOT NULL (an older binary's writes of NULL
                            are refused)
  not-null-without-default  adds a NOT NULL (or PRIMARY KEY) column without a default (fails on a
                            table with rows; an older binary's inserts are refused)
  rename                    renames an object or a column, or moves it to another schema (an
                            older binary no longer finds it)
  disable-trigger           disables a trigger or makes it fire in replica sessions only (the
                            fences and the evidence's append-only guarantees are triggers)

Statements are found with an SQL lexer (comments, quoted strings and identifiers, dollar quotes).
A function or procedure body is not run by the migration and is not checked; a `DO` block is
run, so its statements and the SQL text it builds in string literals (`EXECUTE format('...')`)
are checked like the migration's own. A function called by a top-level SELECT is not followed.

A destructive statement passes only with an explicit, reviewed allowance naming its rule:

  - in the migration, a comment between the previous statement and the end of this one:
        -- migration-check: allow drop, reviewed by <name>: <why nothing is lost>
  - for a migration already released, whose text can no longer change (its checksum is recorded
    in every database it was applied to), a line of deploy/migrations/allowances:
        <file> <rule> <fingerprint> reviewed by <name>: <why nothing is lost>
    where the fingerprint (printed by this check) binds the allowance to the statement's text.

An allowance that allows nothing, or a comment that mentions `migration-check:` without being a
well-formed allowance, fails the check too.

Usage: python3 deploy/migrations/check.py [MIGRATIONS_DIR [ALLOWANCES_FILE]]
       (defaults: migrations/ and deploy/migrations/allowances of this repository)
Exit 0 when every destructive statement is allowed, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_MIGRATIONS = REPO / "migrations"
DEFAULT_ALLOWANCES = HERE / "allowances"

RULES = {
    "drop": "drops an object or part of one: its rows, or the guarantee it carried, are gone",
    "truncate": "empties a table",
    "delete": "deletes rows",
    "update": "rewrites existing rows",
    "alter-type": "changes a column's type: a rewrite, and an older binary may not read it",
    "set-not-null": "makes an existing column NOT NULL: an older binary's writes of NULL fail",
    "not-null-without-default": "adds a NOT NULL column without a default: fails on a table "
    "with rows, and an older binary's inserts are refused",
    "rename": "renames or moves an object or a column: an older binary no longer finds it",
    "disable-trigger": "disables a trigger (or makes it replica-only): the fences and the "
    "evidence's append-only guarantees are triggers",
}

ALLOWANCE = re.compile(
    r"migration-check:\s*allow\s+(?P<rule>[a-z-]+)\s*,\s*reviewed by\s+(?P<who>[^:]*?\S)\s*:"
    r"\s*(?P<why>\S.*)$"
)
MENTION = "migration-check:"

# Words after which a PL/pgSQL block starts a new statement.
CONTROL_WORDS = {"BEGIN", "THEN", "ELSE", "LOOP", "DECLARE"}
# What an `ALTER TABLE ... ADD` adds when it is not a column.
TABLE_CONSTRAINTS = {"CONSTRAINT", "CHECK", "UNIQUE", "PRIMARY", "FOREIGN", "EXCLUDE"}


# --------------------------------------------------------------------------------------------
# Lexing


@dataclass
class Token:
    kind: str  # "code", "string", "dollar", "ident", "comment", "semicolon"
    text: str  # code text, a string's content, a dollar body, an identifier, a comment
    line: int


def lex(sql: str) -> list[Token]:
    """Splits SQL into tokens; quoted text and comments are kept whole."""
    tokens: list[Token] = []
    i, line, n = 0, 1, len(sql)
    code_start, code_line = 0, 1

    def flush_code(end: int) -> None:
        if end > code_start:
            tokens.append(Token("code", sql[code_start:end], code_line))

    while i < n:
        c = sql[i]
        two = sql[i : i + 2]
        if two == "--":
            flush_code(i)
            end = sql.find("\n", i)
            end = n if end < 0 else end
            tokens.append(Token("comment", sql[i + 2 : end], line))
            i = end
        elif two == "/*":
            flush_code(i)
            depth, j = 1, i + 2
            while j < n and depth:
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            tokens.append(Token("comment", sql[i + 2 : j - 2], line))
            line += sql.count("\n", i, j)
            i = j
        elif c == "'" or (c in "eE" and sql[i + 1 : i + 2] == "'" and not _word_char(sql, i - 1)):
            flush_code(i)
            start = i + 1 if c == "'" else i + 2
            backslash = c != "'"
            j, content = start, []
            while j < n:
                if backslash and sql[j] == "\\" and j + 1 < n:
                    content.append(sql[j : j + 2])
                    j += 2
                elif sql[j] == "'" and sql[j + 1 : j + 2] == "'":
                    content.append("'")
                    j += 2
                elif sql[j] == "'":
                    break
                else:
                    content.append(sql[j])
                    j += 1
            tokens.append(Token("string", "".join(content), line))
            line += sql.count("\n", i, j)
            i = j + 1
        elif c == '"':
            flush_code(i)
            j = i + 1
            while j < n and not (sql[j] == '"' and sql[j + 1 : j + 2] != '"'):
                j += 2 if sql[j] == '"' else 1
            tokens.append(Token("ident", sql[i + 1 : j].replace('""', '"'), line))
            line += sql.count("\n", i, j)
            i = j + 1
        elif c == "$" and not _word_char(sql, i - 1):
            match = re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$", sql[i:])
            if not match:
                i += 1
                continue
            flush_code(i)
            tag = match.group(0)
            body_start = i + len(tag)
            end = sql.find(tag, body_start)
            end = n if end < 0 else end
            tokens.append(Token("dollar", sql[body_start:end], line))
            line += sql.count("\n", i, end + len(tag))
            i = end + len(tag)
        elif c == ";":
            flush_code(i)
            tokens.append(Token("semicolon", ";", line))
            i += 1
        else:
            if c == "\n":
                line += 1
            i += 1
            continue
        code_start, code_line = i, line
    flush_code(n)
    return tokens


def _word_char(sql: str, index: int) -> bool:
    return index >= 0 and (sql[index].isalnum() or sql[index] == "_")


# --------------------------------------------------------------------------------------------
# Statements


@dataclass
class Statement:
    tokens: list[Token]
    line: int = 0  # of its first code token

    @property
    def code(self) -> str:
        """The statement with comments removed, quoted text as placeholders, one space between
        words: what the rules read."""
        parts = []
        for token in self.tokens:
            if token.kind == "code":
                parts.append(token.text)
            elif token.kind == "string":
                parts.append(" '' ")
            elif token.kind == "dollar":
                parts.append(" $$ ")
            elif token.kind == "ident":
                parts.append(' "' + token.text + '" ')
        return " ".join(" ".join(parts).split())

    @property
    def comments(self) -> list[tuple[int, str]]:
        return [(t.line, t.text.strip()) for t in self.tokens if t.kind == "comment"]

    def fingerprint(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:16]


def statements(tokens: list[Token]) -> list[Statement]:
    """Groups tokens into statements at top-level semicolons; a statement also carries the
    comments between the previous statement and its own end."""
    out: list[Statement] = []
    current: list[Token] = []
    for token in tokens:
        if token.kind == "semicolon":
            out.append(Statement(current))
            current = []
        else:
            current.append(token)
    out.append(Statement(current))
    for statement in out:
        first = next((t for t in statement.tokens if t.kind != "comment" and t.text.strip()), None)
        if first is None:
            continue
        leading = first.text[: len(first.text) - len(first.text.lstrip())]
        statement.line = first.line + (leading.count("\n") if first.kind == "code" else 0)
    return out


# --------------------------------------------------------------------------------------------
# Rules


def top_level_parts(text: str, separator: str = ",") -> list[str]:
    """`text` split at `separator`s outside parentheses."""
    parts, depth, current = [], 0, []
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        if c == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def without_parentheses(text: str) -> str:
    out, depth = [], 0
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def words(text: str) -> list[str]:
    return re.findall(r'"[^"]*"|[A-Za-z_][A-Za-z0-9_$]*|\S', text)


def alter_table_actions(code: str) -> list[str]:
    """The comma-separated actions of `ALTER TABLE [IF EXISTS] [ONLY] name [*] ...`."""
    rest = re.sub(
        r"^ALTER\s+(FOREIGN\s+)?TABLE\s+(IF\s+EXISTS\s+)?(ONLY\s+)?", "", code, flags=re.I
    )
    name = re.match(r'\s*(("[^"]*"|[A-Za-z0-9_$]+)(\s*\.\s*("[^"]*"|[A-Za-z0-9_$]+))*)\s*\*?', rest)
    return top_level_parts(rest[name.end() :] if name else rest)


def alter_table_rules(action: str) -> list[str]:
    upper = action.upper()
    lead = words(upper)
    found = []
    if re.search(r"\bDROP\b", upper) or (lead and lead[0] == "DETACH"):
        found.append("drop")
    if re.search(r"\bRENAME\b", upper) or re.match(r"SET\s+SCHEMA\b", upper):
        found.append("rename")
    if re.match(r"ALTER\s+(COLUMN\s+)?\S+\s+(SET\s+DATA\s+)?TYPE\b", upper):
        found.append("alter-type")
    if re.match(r"ALTER\s+(COLUMN\s+)?\S+\s+SET\s+NOT\s+NULL\b", upper):
        found.append("set-not-null")
    if re.match(r"(DISABLE\s+TRIGGER|ENABLE\s+REPLICA\s+TRIGGER)\b", upper):
        found.append("disable-trigger")
    if lead and lead[0] == "ADD" and (len(lead) < 2 or lead[1] not in TABLE_CONSTRAINTS):
        definition = without_parentheses(upper)
        required = re.search(r"\bNOT\s+NULL\b|\bPRIMARY\s+KEY\b", definition)
        filled = re.search(r"\bDEFAULT\b|\bGENERATED\b", definition)
        if required and not filled:
            found.append("not-null-without-default")
    return found


def statement_rules(code: str) -> list[str]:
    """The rules a plain SQL statement (no DO block) breaks."""
    upper = code.upper()
    lead = words(upper)
    if not lead:
        return []
    verb = lead[0]
    if verb == "DROP":
        return ["drop"]
    if verb == "TRUNCATE":
        return ["truncate"]
    if verb == "DELETE":
        return ["delete"]
    if verb == "UPDATE":
        return ["update"]
    if verb == "WITH":
        found = []
        if re.search(r"\bDELETE\s+FROM\b", upper):
            found.append("delete")
        if re.search(r"\bUPDATE\s+\S+\s+(AS\s+\S+\s+|\S+\s+)?SET\b", upper):
            found.append("update")
        return found
    if verb == "ALTER":
        if re.match(r"ALTER\s+(FOREIGN\s+)?TABLE\b", upper):
            found = []
            for action in alter_table_actions(code):
                found += [r for r in alter_table_rules(action) if r not in found]
            return found
        if re.match(r"ALTER\s+DEFAULT\s+PRIVILEGES\b", upper):
            return []
        found = []
        if re.search(r"\bDROP\b", upper):
            found.append("drop")
        if re.search(r"\bRENAME\b", upper) or re.search(r"\bSET\s+SCHEMA\b", upper):
            found.append("rename")
        if re.search(r"\bALTER\s+ATTRIBUTE\s+\S+\s+(SET\s+DATA\s+)?TYPE\b", upper):
            found.append("alter-type")
        return found
    return []


# The code before a string literal that EXECUTE runs: `EXECUTE '...'`, `EXECUTE format('...'`.
EXECUTED = re.compile(r"\bEXECUTE(\s+format\s*\()?\s*$", re.I)


def embedded_sql(body: str) -> list[str]:
    """The SQL a DO block runs: each of its statements (also those after THEN, ELSE, LOOP,
    BEGIN) and the SQL text EXECUTE runs (the string literal after `EXECUTE` or
    `EXECUTE format(`). Other string literals (messages) are not SQL."""
    out: list[str] = []
    for statement in statements(lex(body)):
        code = statement.code
        out.append(code)
        spoken = words(code)
        for index, word in enumerate(spoken):
            if word.upper() in CONTROL_WORDS and index + 1 < len(spoken):
                out.append(" ".join(spoken[index + 1 :]))
        before = ""
        for token in statement.tokens:
            if token.kind == "code":
                before = token.text
            elif token.kind in ("string", "dollar"):
                if EXECUTED.search(before):
                    out.extend(s.code for s in statements(lex(token.text)))
                before = ""
    return out


def rules_broken(statement: Statement) -> list[str]:
    code = statement.code
    lead = words(code.upper())
    if lead and lead[0] == "DO":
        found: list[str] = []
        for token in statement.tokens:
            if token.kind in ("dollar", "string"):
                for embedded in embedded_sql(token.text):
                    found += [r for r in statement_rules(embedded) if r not in found]
        return found
    return statement_rules(code)


# --------------------------------------------------------------------------------------------
# Allowances and the check


@dataclass
class Allowance:
    rule: str
    who: str
    why: str
    where: str
    used: bool = False


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)
    statements: int = 0
    files: int = 0


def parse_external(path: Path, report: Report) -> dict[tuple[str, str, str], Allowance]:
    allowances: dict[tuple[str, str, str], Allowance] = {}
    if not path.exists():
        return allowances
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(
            r"(?P<file>\S+)\s+(?P<rule>[a-z-]+)\s+(?P<fp>[0-9a-f]{16})\s+reviewed by\s+"
            r"(?P<who>[^:]*?\S)\s*:\s*(?P<why>\S.*)$",
            line,
        )
        if not match or match["rule"] not in RULES:
            report.errors.append(
                f"{path}:{number}: not an allowance: write "
                "`<file> <rule> <fingerprint> reviewed by <name>: <why nothing is lost>` "
                f"with a rule among {', '.join(RULES)}"
            )
            continue
        key = (match["file"], match["rule"], match["fp"])
        allowances[key] = Allowance(
            match["rule"], match["who"], match["why"], f"{path.name}:{number}"
        )
    return allowances


def inline_allowances(
    statement: Statement, file: str, report: Report
) -> dict[str, Allowance]:
    allowances: dict[str, Allowance] = {}
    for line, text in statement.comments:
        if MENTION not in text:
            continue
        match = ALLOWANCE.search(text)
        if not match or match["rule"] not in RULES:
            report.errors.append(
                f"{file}:{line}: not an allowance: write `-- migration-check: allow <rule>, "
                f"reviewed by <name>: <why nothing is lost>` with a rule among {', '.join(RULES)}"
            )
            continue
        allowances[match["rule"]] = Allowance(
            match["rule"], match["who"], match["why"], f"{file}:{line}"
        )
    return allowances


def excerpt(code: str, limit: int = 100) -> str:
    return code if len(code) <= limit else code[: limit - 1] + "…"


def check(migrations: Path, allowances_file: Path) -> Report:
    report = Report()
    external = parse_external(allowances_file, report)
    for path in sorted(migrations.glob("*.sql")):
        report.files += 1
        file = path.name
        for statement in statements(lex(path.read_text())):
            if not statement.code:
                continue
            report.statements += 1
            inline = inline_allowances(statement, file, report)
            for rule in rules_broken(statement):
                allowance = inline.get(rule) or external.get(
                    (file, rule, statement.fingerprint())
                )
                if allowance:
                    allowance.used = True
                    report.allowed.append(
                        f"{file}:{statement.line}: {rule}, reviewed by {allowance.who} "
                        f"({allowance.where})"
                    )
                    continue
                report.errors.append(
                    f"{file}:{statement.line}: {rule}: {excerpt(statement.code)}\n"
                    f"    {RULES[rule]}.\n"
                    f"    If that is intended and reviewed, allow it in the migration:\n"
                    f"      -- migration-check: allow {rule}, reviewed by <name>: <why nothing "
                    f"is lost>\n"
                    f"    or, for a migration already released, in {allowances_file.name}:\n"
                    f"      {file} {rule} {statement.fingerprint()} reviewed by <name>: <why>"
                )
            for allowance in inline.values():
                if not allowance.used:
                    report.errors.append(
                        f"{allowance.where}: allowance for {allowance.rule}, but the statement "
                        f"breaks no such rule: remove it"
                    )
    for (file, rule, fingerprint), allowance in external.items():
        if not allowance.used:
            report.errors.append(
                f"{allowances_file.name} ({allowance.where}): allowance for {rule} in {file} "
                f"({fingerprint}) matches no statement: the statement changed or is gone; "
                "remove or renew it"
            )
    return report


def main(argv: list[str]) -> int:
    if len(argv) > 3 or any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    migrations = Path(argv[1]) if len(argv) > 1 else DEFAULT_MIGRATIONS
    allowances = Path(argv[2]) if len(argv) > 2 else DEFAULT_ALLOWANCES
    if not migrations.is_dir():
        print(f"{migrations}: not a directory of migrations", file=sys.stderr)
        return 2
    report = check(migrations, allowances)
    for line in report.allowed:
        print(f"allowed: {line}")
    for error in report.errors:
        print(f"FAIL {error}", file=sys.stderr)
    if report.errors:
        print(
            f"migrations are not additive: {len(report.errors)} problem(s) in "
            f"{report.files} files",
            file=sys.stderr,
        )
        return 1
    print(
        f"migrations are additive: {report.statements} statements in {report.files} files, "
        f"{len(report.allowed)} destructive one(s) allowed after review"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
