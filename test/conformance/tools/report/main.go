// Command report summarises a ginkgo JUnit report of the conformance suite (docs/conformance.md): how many
// specs ran, passed, failed and were skipped while running, and each failure with the first line of its
// message, as text and as a Markdown table. Its exit status is the run's verdict, so that a run cannot pass
// silently: it fails when a spec failed, when a spec that ran skipped itself (it could not run: the reason is
// printed), when a suite node (BeforeSuite and the like) failed, and when fewer specs ran than the focus
// selected (-expect).
package main

import (
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type suites struct {
	Suites []suite `xml:"testsuite"`
}

type suite struct {
	Name  string     `xml:"name,attr"`
	Time  float64    `xml:"time,attr"`
	Cases []testCase `xml:"testcase"`
}

type testCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
	} `xml:"error"`
}

// outcome of one spec or suite node.
type outcome struct {
	name   string
	state  string // passed, failed, skipped (at run time)
	secs   float64
	reason string
}

// summary is what a report says.
type summary struct {
	ran, passed, failed, skippedRunning, notSelected int
	suiteSecs                                        float64
	problems                                         []outcome // failed specs and suite nodes, specs skipped at run time
	specs                                            []outcome
}

const specPrefix = "[It] "

func summarise(r io.Reader) (summary, error) {
	var ss suites
	if err := xml.NewDecoder(r).Decode(&ss); err != nil {
		return summary{}, fmt.Errorf("reading the JUnit report: %w", err)
	}
	var s summary
	for _, su := range ss.Suites {
		s.suiteSecs += su.Time
		for _, c := range su.Cases {
			spec := strings.HasPrefix(c.Name, specPrefix)
			name := strings.TrimPrefix(c.Name, specPrefix)
			o := outcome{name: name, secs: c.Time}
			switch {
			case c.Failure != nil || c.Error != nil || isFailedStatus(c.Status):
				o.state = "failed"
				o.reason = firstLine(failureMessage(c))
			case c.Skipped != nil || c.Status == "skipped" || c.Status == "pending":
				msg := ""
				if c.Skipped != nil {
					msg = c.Skipped.Message
				}
				// Specs the focus did not select are reported as skipped with a bare "skipped" (or pending):
				// they never ran. A spec that ran and called Skip(reason) says "skipped - reason".
				if !spec || msg == "" || msg == "skipped" || msg == "pending" || c.Status == "pending" {
					if spec {
						s.notSelected++
					}
					continue
				}
				o.state = "skipped"
				o.reason = firstLine(strings.TrimPrefix(msg, "skipped - "))
			default:
				o.state = "passed"
			}
			if !spec {
				// Suite nodes (SynchronizedBeforeSuite, ReportAfterSuite, ...) only matter when they fail.
				if o.state == "failed" {
					s.problems = append(s.problems, o)
					s.failed++
				}
				continue
			}
			s.ran++
			switch o.state {
			case "passed":
				s.passed++
			case "failed":
				s.failed++
				s.problems = append(s.problems, o)
			case "skipped":
				s.skippedRunning++
				s.problems = append(s.problems, o)
			}
			s.specs = append(s.specs, o)
		}
	}
	sort.Slice(s.specs, func(i, j int) bool { return s.specs[i].name < s.specs[j].name })
	return s, nil
}

// add merges the summary of another report (the full run's parallel and serial parts).
func (s summary) add(o summary) summary {
	// Both parts list the whole suite: a spec one part left out may have run in the other.
	total := max(s.ran+s.notSelected, o.ran+o.notSelected)
	s.ran += o.ran
	s.passed += o.passed
	s.failed += o.failed
	s.skippedRunning += o.skippedRunning
	s.notSelected = max(total-s.ran, 0)
	s.suiteSecs += o.suiteSecs
	s.problems = append(s.problems, o.problems...)
	s.specs = append(s.specs, o.specs...)
	sort.Slice(s.specs, func(i, j int) bool { return s.specs[i].name < s.specs[j].name })
	return s
}

func isFailedStatus(st string) bool {
	switch st {
	case "failed", "panicked", "interrupted", "timedout", "aborted":
		return true
	}
	return false
}

func failureMessage(c testCase) string {
	if c.Failure != nil {
		if strings.TrimSpace(c.Failure.Message) != "" {
			return c.Failure.Message
		}
		return c.Failure.Text
	}
	if c.Error != nil {
		return c.Error.Type + ": " + c.Error.Message
	}
	return c.Status
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 300 {
				l = l[:300] + "..."
			}
			return l
		}
	}
	return "(no message)"
}

// verdict is the reason the run fails, or "" when it passes.
func (s summary) verdict(expect int, allowSkip bool) string {
	var why []string
	if s.failed > 0 {
		why = append(why, fmt.Sprintf("%d failed", s.failed))
	}
	if s.skippedRunning > 0 && !allowSkip {
		why = append(why, fmt.Sprintf("%d skipped while running (they could not run here)", s.skippedRunning))
	}
	if s.ran == 0 {
		why = append(why, "no spec ran")
	} else if expect > 0 && s.ran < expect {
		why = append(why, fmt.Sprintf("%d specs ran, the focus selects %d", s.ran, expect))
	}
	return strings.Join(why, "; ")
}

func (s summary) text(w io.Writer) {
	fmt.Fprintf(w, "conformance: %d specs ran: %d passed, %d failed, %d skipped while running (%d not selected); suite time %.0fs\n",
		s.ran, s.passed, s.failed, s.skippedRunning, s.notSelected, s.suiteSecs)
	for _, p := range s.problems {
		fmt.Fprintf(w, "  %-7s %s\n          %s\n", strings.ToUpper(p.state), p.name, p.reason)
	}
}

func mdCell(v string) string { return strings.ReplaceAll(strings.ReplaceAll(v, "|", `\|`), "\n", " ") }

func (s summary) markdown(w io.Writer) {
	fmt.Fprintf(w, "| spec | result | time | reason |\n|---|---|---|---|\n")
	for _, o := range s.specs {
		fmt.Fprintf(w, "| %s | %s | %.0f s | %s |\n", mdCell(o.name), o.state, o.secs, mdCell(o.reason))
	}
}

func main() {
	md := flag.String("md", "", "write a Markdown table of the specs that ran to this file")
	expect := flag.Int("expect", 0, "fail when fewer specs ran (what the focus selects)")
	allowSkip := flag.Bool("allow-skip", false, "a spec that skips itself while running does not fail the run")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: report [-md FILE] [-expect N] [-allow-skip] JUNIT.xml...")
		os.Exit(2)
	}
	var s summary
	for _, file := range flag.Args() {
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintf(os.Stderr, "report: %v (did the suite run at all?)\n", err)
			os.Exit(1)
		}
		one, err := summarise(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "report: %s: %v\n", file, err)
			os.Exit(1)
		}
		s = s.add(one)
	}
	s.text(os.Stdout)
	if *md != "" {
		var b strings.Builder
		s.markdown(&b)
		if err := os.WriteFile(*md, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "report: %v\n", err)
			os.Exit(1)
		}
	}
	if why := s.verdict(*expect, *allowSkip); why != "" {
		fmt.Printf("conformance: FAILED: %s\n", why)
		os.Exit(1)
	}
	fmt.Println("conformance: PASSED")
}
