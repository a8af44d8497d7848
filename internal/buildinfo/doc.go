// Package buildinfo says which pubsink this binary is: the module version,
// the VCS revision it was built from and the Go version, read from the
// build information the Go toolchain embeds (runtime/debug.ReadBuildInfo).
// `pubsink version` prints it and pubsink_build_info exports it.
package buildinfo
