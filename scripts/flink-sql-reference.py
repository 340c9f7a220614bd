#!/usr/bin/env python3
"""Runs a tidemark SQL pipeline's query on Flink (PyFlink 2.3) over a JSON-lines file and prints
Flink's final rows, one JSON object per line, sorted: the reference tidemark's rows are checked
against (tests/golden/sql/).

Usage: flink-sql-reference.py PIPELINE.sql EVENTS.jsonl

The query text is Flink's as written; only the source table's WITH options change (a Kafka source
becomes a file), SET statements and the sink table are left out, and INSERT INTO becomes the bare
SELECT. Views are created as written. Lines of the events file that are tidemark control lines
({"$...": ...}) are left out. A column of type TIMESTAMP_LTZ (a time attribute a query passes
through) is cast to TIMESTAMP(3) in UTC before it is collected, because PyFlink cannot hand an
Instant to Python; the rows are Flink's otherwise.
"""
import json
import os
import re
import sys
import tempfile

from pyflink.table import DataTypes, EnvironmentSettings, TableEnvironment
from pyflink.table.expressions import col


def statements(text):
    text = re.sub(r"--[^\n]*", "", text)
    return [s.strip() for s in text.split(";") if s.strip()]


def main(sql_path, events_path):
    stmts = statements(open(sql_path).read())
    data = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    with open(events_path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith('{"$'):
                data.write(line + "\n")
    data.close()
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("table.local-time-zone", "UTC")
    conf.set("parallelism.default", "1")
    query = None
    for s in stmts:
        head = s.split(None, 3)
        if head[0].upper() == "SET":
            continue
        if head[0].upper() == "CREATE" and "VIEW" in [w.upper() for w in head[1:3]]:
            env.execute_sql(s)
        elif head[0].upper() == "CREATE":
            if "(" not in s.split("WITH")[0]:
                continue  # a sink without columns: tidemark's
            source = re.sub(
                r"WITH\s*\(.*\)\s*$",
                f"WITH ('connector' = 'filesystem', 'path' = 'file://{data.name}', 'format' = 'json')",
                s,
                flags=re.S,
            )
            env.execute_sql(source)
        elif head[0].upper() == "INSERT":
            query = re.sub(r"^INSERT\s+INTO\s+\S+\s+", "", s, flags=re.S | re.I)
        elif head[0].upper() == "SELECT":
            query = s
    table = env.sql_query(query)
    schema = table.get_schema()
    names = schema.get_field_names()
    types = schema.get_field_data_types()
    if any("LOCALZONED" in str(t).upper() for t in types):
        table = table.select(
            *[
                col(n).cast(DataTypes.TIMESTAMP(3)).alias(n)
                if "LOCALZONED" in str(t).upper()
                else col(n)
                for n, t in zip(names, types)
            ]
        )
    rows = []
    with table.execute().collect() as results:
        for r in results:
            row = {}
            for name, v in zip(names, r):
                if hasattr(v, "strftime"):
                    v = v.strftime("%Y-%m-%d %H:%M:%S.") + f"{v.microsecond // 1000:03d}"
                elif hasattr(v, "as_tuple"):  # Decimal
                    v = float(v)
                row[name] = v
            rows.append(json.dumps(row, sort_keys=True))
    os.unlink(data.name)
    for r in sorted(rows):
        print(r)


if __name__ == "__main__":
    main(*sys.argv[1:3])
