// Command flightsduck runs the query of `streamdag run flights` through
// DuckDB (the duckdb-go driver, DuckDB linked statically), so the two can
// be compared on the same file and the same cores:
//
//	flightsduck --input FILE.parquet [--min-delay N] [--top K] [--out FILE.csv]
//
// It keeps the rows with delay > N (rows whose delay or key is null are
// dropped), groups them by origin (or, for a file without an "origin"
// column, by floor(time), the hour of day), takes count, sum, mean and max
// of delay per group, sorts by count descending then key ascending
// (numerically for hours) and keeps the first K groups (0 keeps all). The
// CSV it writes (to --out, or to stdout) has the header
// key,count,delay_sum,delay_mean,delay_max and formats delay_mean as
// delay_sum/count with 6 decimals, byte for byte as streamdag writes it.
//
// It reads Parquet through DuckDB's built-in read_parquet. Arrow IPC files
// are refused: DuckDB reads them only through its "arrow" extension, which
// is not built into the static library and would be downloaded at run time.
//
// On stderr it prints one line with the in-process times: opening the
// database, and the query from submitting the SQL to the last row fetched.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"
)

// row is one group of the result.
type row struct {
	key             string
	count, sum, max int64
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "flightsduck:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("flightsduck", flag.ContinueOnError)
	fl.SetOutput(stderr)
	input := fl.String("input", "", "Parquet file to read (required)")
	minDelay := fl.Int64("min-delay", 0, "keep flights with delay > N minutes")
	top := fl.Int("top", 10, "keep the K groups with the most flights; 0 keeps all")
	out := fl.String("out", "", "write the result to FILE.csv instead of stdout")
	threads := fl.Int("threads", 0, "DuckDB worker threads; 0 leaves DuckDB's default (one per core)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	switch {
	case *input == "":
		return errors.New("--input is required")
	case fl.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	case *top < 0:
		return fmt.Errorf("--top %d: must be 0 (all) or more", *top)
	case *threads < 0:
		return fmt.Errorf("--threads %d: must be 0 (default) or more", *threads)
	case *out != "" && !strings.EqualFold(filepath.Ext(*out), ".csv"):
		return fmt.Errorf("--out %s: only .csv is written", *out)
	}
	if ext := strings.ToLower(filepath.Ext(*input)); ext == ".arrow" || ext == ".ipc" || ext == ".feather" {
		return fmt.Errorf("%s: DuckDB reads Arrow IPC only through its arrow extension, which the statically linked library does not include; give a Parquet file", *input)
	}
	if _, err := os.Stat(*input); err != nil {
		return err
	}

	ctx := context.Background()
	t0 := time.Now()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return fmt.Errorf("open duckdb: %w", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx) // one connection, so SET applies to the query
	if err != nil {
		return fmt.Errorf("open duckdb: %w", err)
	}
	defer conn.Close()
	if *threads > 0 {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET threads = %d", *threads)); err != nil {
			return fmt.Errorf("set threads: %w", err)
		}
	}
	open := time.Since(t0)

	t1 := time.Now()
	src := "read_parquet(" + quote(*input) + ")"
	hour, err := groupsByHour(ctx, conn, src, *input)
	if err != nil {
		return err
	}
	rows, err := query(ctx, conn, src, hour, *minDelay, *top)
	if err != nil {
		return fmt.Errorf("%s: %w", *input, err)
	}
	took := time.Since(t1)
	fmt.Fprintf(stderr, "flightsduck: %d groups; open %v, query %v (in process)\n", len(rows), open.Round(time.Microsecond), took.Round(time.Microsecond))

	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		bw := bufio.NewWriter(f)
		if err := writeCSV(bw, rows); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", *out, err)
		}
		if err := bw.Flush(); err != nil {
			f.Close()
			return fmt.Errorf("%s: %w", *out, err)
		}
		return f.Close()
	}
	return writeCSV(w, rows)
}

// groupsByHour reports whether src is grouped by hour (it has a "time"
// column and no "origin" column) rather than by origin, as streamdag
// chooses; it fails when src has neither or no "delay" column.
func groupsByHour(ctx context.Context, conn *sql.Conn, src, name string) (bool, error) {
	rs, err := conn.QueryContext(ctx, "DESCRIBE SELECT * FROM "+src)
	if err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	defer rs.Close()
	cols, err := rs.Columns()
	if err != nil {
		return false, err
	}
	have := map[string]bool{}
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return false, err
		}
		if s, ok := vals[0].(string); ok { // column_name
			have[s] = true
		}
	}
	if err := rs.Err(); err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	switch {
	case !have["delay"]:
		return false, fmt.Errorf(`%s: needs a "delay" column`, name)
	case have["origin"]:
		return false, nil
	case have["time"]:
		return true, nil
	}
	return false, fmt.Errorf(`%s: needs an "origin" or a "time" column`, name)
}

// query runs the flights query over src and returns its groups in order.
// The sum is cast to BIGINT, as streamdag sums in int64; the mean is
// computed by the caller from sum and count, as streamdag does.
func query(ctx context.Context, conn *sql.Conn, src string, hour bool, minDelay int64, top int) ([]row, error) {
	key := "origin"
	if hour {
		key = "CAST(floor(time) AS BIGINT)"
	}
	q := fmt.Sprintf(`SELECT %[1]s AS k, count(*), CAST(sum(delay) AS BIGINT), CAST(max(delay) AS BIGINT)
FROM %[2]s
WHERE delay > %[3]d AND %[1]s IS NOT NULL
GROUP BY k
ORDER BY 2 DESC, k ASC`, key, src, minDelay)
	if top > 0 {
		q += fmt.Sprintf("\nLIMIT %d", top)
	}
	rs, err := conn.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var k any
		if err := rs.Scan(&k, &r.count, &r.sum, &r.max); err != nil {
			return nil, err
		}
		switch v := k.(type) {
		case string:
			r.key = v
		case int64:
			r.key = strconv.FormatInt(v, 10)
		default:
			return nil, fmt.Errorf("group key is %T, not a string or an integer", k)
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// writeCSV writes rows in the format of streamdag's flights.WriteCSV.
func writeCSV(w io.Writer, rows []row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"key", "count", "delay_sum", "delay_mean", "delay_max"}); err != nil {
		return err
	}
	for _, r := range rows {
		mean := float64(r.sum) / float64(r.count)
		if err := cw.Write([]string{r.key, strconv.FormatInt(r.count, 10), strconv.FormatInt(r.sum, 10),
			strconv.FormatFloat(mean, 'f', 6, 64), strconv.FormatInt(r.max, 10)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// quote returns s as an SQL string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
