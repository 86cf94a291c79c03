package torture

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// reportedKinds maps the start of a gateway log message to the kind of
// LinkReported event it is. Each names a way the documented window opens.
var reportedKinds = []struct{ prefix, kind string }{
	{"upstream outcome unknown", ReportedOutcomeUnknown},
	{"retrysafe: result not stored;", ReportedNotStored},
	{"retrysafe: result not stored:", ReportedLeaseLost},
	{"retrysafe: lease lost", ReportedLeaseLost},
	{"retrysafe: lease renewal failed", ReportedRenewalFailed},
}

// readGatewayLog returns the documented-window events a gateway's JSON log
// reports, as faults of LinkReported at the time of the log line.
func readGatewayLog(path string, gateway int) ([]Fault, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Fault
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Err  string    `json:"err"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue // not a log record (a panic, say): it is in the log file
		}
		for _, r := range reportedKinds {
			if strings.HasPrefix(line.Msg, r.prefix) {
				out = append(out, Fault{Kind: r.kind, Link: LinkReported, Gateway: gateway, Start: line.Time, End: line.Time,
					Detail: strings.TrimSpace(line.Msg + " " + line.Err)})
				break
			}
		}
	}
	return out, sc.Err()
}

// LoadHistory reads the history.json a run wrote to dir. When the history
// holds no gateway-reported events (it was written before they were
// recorded), they are read from the gateway-N.log files next to it.
func LoadHistory(dir string) (*History, error) {
	b, err := os.ReadFile(filepath.Join(dir, "history.json"))
	if err != nil {
		return nil, err
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if slices.ContainsFunc(h.Faults, func(f Fault) bool { return f.Link == LinkReported }) {
		return &h, nil
	}
	for g := range h.Params.Gateways {
		events, err := readGatewayLog(filepath.Join(dir, fmt.Sprintf("gateway-%d.log", g)), g)
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			e.ID = len(h.Faults) + 1
			h.Faults = append(h.Faults, e)
		}
	}
	return &h, nil
}
