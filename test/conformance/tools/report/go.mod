// The conformance run's summary (test/conformance/run.sh): reads ginkgo's JUnit report. Standard library only.
module github.com/capkk-rs/capkk-rs/test/conformance/tools/report

go 1.26.0
