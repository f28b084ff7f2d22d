package flights

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
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

// WriteTable writes rows as an aligned text table for terminals.
func WriteTable(w io.Writer, rows []Row, key KeyKind, withNames bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	keyName := "origin"
	if key == KeyHour {
		keyName = "hour"
	}
	head := keyName + "\tcount\tdelay_sum\tdelay_mean\tdelay_max\t"
	if withNames {
		head += "name\tcity\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%d\t%d\t%.2f\t%d\t", r.Key, r.Count, r.DelaySum, r.DelayMean, r.DelayMax)
		if withNames {
			line += r.Name + "\t" + r.City + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}
