package flights

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WriteCSV writes rows as CSV with the header
// key,count,delay_sum,delay_mean,delay_max, followed by name,city when
// withNames is set. delay_mean has up to 6 decimals.
func WriteCSV(w io.Writer, rows []Row, withNames bool) error {
	cw := csv.NewWriter(w)
	head := []string{"key", "count", "delay_sum", "delay_mean", "delay_max"}
	if withNames {
		head = append(head, "name", "city")
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, r := range rows {
		rec := []string{r.Key, strconv.FormatInt(r.Count, 10), strconv.FormatInt(r.DelaySum, 10),
			strconv.FormatFloat(r.DelayMean, 'f', 6, 64), strconv.FormatInt(r.DelayMax, 10)}
		if withNames {
			rec = append(rec, r.Name, r.City)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes rows as a JSON array of objects with the fields key,
// count, delay_sum, delay_mean, delay_max (and name, city when known).
func WriteJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if rows == nil {
		rows = []Row{}
	}
	return enc.Encode(rows)
}

// WriteTable writes rows as an aligned text table for terminals: text
// columns (an origin airport code, name, city) left-aligned, numbers
// (hour, counts, delays) right-aligned, two spaces between columns.
func WriteTable(w io.Writer, rows []Row, key KeyKind, withNames bool) error {
	head := []string{"origin", "count", "delay_sum", "delay_mean", "delay_max"}
	left := []bool{true, false, false, false, false}
	if key == KeyHour {
		head[0], left[0] = "hour", false
	}
	if withNames {
		head = append(head, "name", "city")
		left = append(left, true, true)
	}
	cells := [][]string{head}
	for _, r := range rows {
		line := []string{r.Key, strconv.FormatInt(r.Count, 10), strconv.FormatInt(r.DelaySum, 10),
			strconv.FormatFloat(r.DelayMean, 'f', 2, 64), strconv.FormatInt(r.DelayMax, 10)}
		if withNames {
			line = append(line, r.Name, r.City)
		}
		cells = append(cells, line)
	}
	width := make([]int, len(head))
	for _, line := range cells {
		for i, c := range line {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	bw := bufio.NewWriter(w)
	for _, line := range cells {
		var b strings.Builder
		for i, c := range line {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if left[i] {
				b.WriteString(c)
				if i < len(line)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad + c)
			}
		}
		b.WriteByte('\n')
		bw.WriteString(b.String())
	}
	return bw.Flush()
}
