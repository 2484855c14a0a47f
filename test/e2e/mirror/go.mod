// The e2e's test mirror: a static file server for the stand-in release artifacts (standard library only).
module github.com/capkk-rs/capkk-rs/test/e2e/mirror

go 1.26.0
