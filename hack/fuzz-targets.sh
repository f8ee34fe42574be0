#!/usr/bin/env bash
# Lists the fuzz targets of the module as package:FuzzName, one per line.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(' . | while read -r f; do
	pkg="./$(dirname "${f#./}")"
	grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$f" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/' | while read -r t; do
		echo "$pkg:$t"
	done
done
