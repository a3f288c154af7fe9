package main

// stampVersion and stampCommit are stamped at build time, where the build
// information cannot give them: an image or a release built without .git
// (the Dockerfile and `make release` pass
// -ldflags "-X main.stampVersion=... -X main.stampCommit=..."). Empty, the
// build information decides.
var (
	stampVersion string
	stampCommit  string
)
