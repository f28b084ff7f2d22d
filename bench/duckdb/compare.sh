#!/usr/bin/env bash
# compare.sh [FILE.parquet] [RUNS]: builds flightsduck and streamdag, then
# runs each RUNS times (default 5) in alternation on FILE (default
# $STREAMDAG_DATA/flights-3m.parquet, else ../shared/data beside the
# repository), printing per run the whole-process wall time (ms), the peak
# RSS (KiB, /usr/bin/time %M) and the in-process times each prints, and
# checks that the two CSVs are byte-identical.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
input=${1:-${STREAMDAG_DATA:-$root/../shared/data}/flights-3m.parquet}
runs=${2:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
(cd "$here" && go build -o "$tmp/flightsduck" ./cmd/flightsduck)
(cd "$root" && go build -o "$tmp/streamdag" ./cmd/streamdag)
cd "$tmp"
# Run copies, as an installed binary would be: the Go linker writes its
# output through a shared mapping, which leaves the whole file in the page
# cache, and the kernel then maps cached pages around each fault into the
# process, adding them to its peak RSS (for streamdag, about 15 MiB more
# than a copy shows; for flightsduck, whose C linker writes it, under 1).
for b in flightsduck streamdag; do cp "$b" "$b.copy" && mv "$b.copy" "$b"; done
# One run of each first, so both find the file in the page cache.
./flightsduck --input "$input" --out d.csv 2>/dev/null
./streamdag run flights --input "$input" --out s.csv >/dev/null 2>&1
ms() { printf '%d.%02d' $(( ($2 - $1) / 1000000 )) $(( ($2 - $1) / 10000 % 100 )); }
for i in $(seq "$runs"); do
	t0=$(date +%s%N)
	/usr/bin/time -o d.time -f '%M' ./flightsduck --input "$input" --out d.csv 2>d.err
	t1=$(date +%s%N)
	echo "duckdb    $i: wall $(ms "$t0" "$t1") ms, peak RSS $(cat d.time) KiB, $(grep -o 'open.*' d.err)"
	t0=$(date +%s%N)
	/usr/bin/time -o s.time -f '%M' ./streamdag run flights --input "$input" --out s.csv >/dev/null 2>s.err
	t1=$(date +%s%N)
	echo "streamdag $i: wall $(ms "$t0" "$t1") ms, peak RSS $(cat s.time) KiB, run $(grep -o 'event waits\?, [0-9.]* [mµ]\?s' s.err | grep -o '[0-9.]* [mµ]\?s$')"
done
if cmp -s d.csv s.csv; then echo "CSVs identical"; else echo "CSVs differ:"; diff d.csv s.csv || true; exit 1; fi
