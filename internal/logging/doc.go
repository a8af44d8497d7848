// Package logging builds pubsink's zap logger from the log section of the
// configuration: Cloud Logging's JSON fields, or a console format.
//
// Every other package receives the logger and names its own child; none
// creates one.
package logging
