package main

import (
	"strings"
	"testing"
)

// A report as ginkgo writes it for a focused run: a suite node, specs that ran (passed, failed, skipped by
// the spec itself) and specs the focus left out.
const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="2" errors="0" failures="1" time="90.5">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="6" disabled="2" skipped="0" errors="0" failures="1" time="90.5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="3"></testcase>
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="5.2"></testcase>
    <testcase name="[It] [sig-network] DNS should provide DNS for services [Conformance]" classname="Kubernetes e2e suite" status="failed" time="61">
      <failure message="&#xA;  wait for pod dns-test: timed out&#xA;  more" type="failed">stack</failure>
    </testcase>
    <testcase name="[It] [sig-storage] something needing a driver [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0.1">
      <skipped message="skipped - Only supported for providers [gce] (not skeleton)"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] not focused" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] pending one" classname="Kubernetes e2e suite" status="pending" time="0">
      <skipped message="pending"></skipped>
    </testcase>
  </testsuite>
</testsuites>`

func TestSummarise(t *testing.T) {
	s, err := summarise(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	if s.ran != 3 || s.passed != 1 || s.failed != 1 || s.skippedRunning != 1 || s.notSelected != 2 {
		t.Fatalf("counts: %+v", s)
	}
	if len(s.problems) != 2 || s.problems[0].reason != "wait for pod dns-test: timed out" ||
		s.problems[1].reason != "Only supported for providers [gce] (not skeleton)" {
		t.Fatalf("problems: %+v", s.problems)
	}
	if v := s.verdict(3, false); !strings.Contains(v, "1 failed") || !strings.Contains(v, "1 skipped while running") {
		t.Fatalf("verdict %q", v)
	}
	var md strings.Builder
	s.markdown(&md)
	if !strings.Contains(md.String(), "| [sig-network] DNS should provide DNS for services [Conformance] | failed | 61 s | wait for pod dns-test: timed out |") {
		t.Fatalf("markdown:\n%s", md.String())
	}
}

func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		s         summary
		expect    int
		allowSkip bool
		want      string
	}{
		{summary{ran: 3, passed: 3}, 3, false, ""},
		{summary{ran: 2, passed: 2}, 3, false, "2 specs ran, the focus selects 3"},
		{summary{}, 0, false, "no spec ran"},
		{summary{ran: 2, passed: 1, skippedRunning: 1}, 2, true, ""},
		{summary{ran: 1, passed: 1, failed: 1}, 1, false, "1 failed"}, // a suite node failed
	} {
		if got := c.s.verdict(c.expect, c.allowSkip); got != c.want {
			t.Errorf("%+v expect %d: verdict %q, want %q", c.s, c.expect, got, c.want)
		}
	}
}

func TestAdd(t *testing.T) {
	// The full run: the parallel part ran 2 of 5, the serial part 1 of 5.
	a := summary{ran: 2, passed: 2, notSelected: 3, suiteSecs: 10}
	b := summary{ran: 1, failed: 1, notSelected: 4, suiteSecs: 5, problems: []outcome{{name: "x", state: "failed"}}}
	s := summary{}.add(a).add(b)
	if s.ran != 3 || s.passed != 2 || s.failed != 1 || s.notSelected != 2 || s.suiteSecs != 15 || len(s.problems) != 1 {
		t.Fatalf("%+v", s)
	}
}
