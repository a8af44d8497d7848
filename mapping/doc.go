// Package mapping turns one message into the rows it makes: it reads the
// payload by its format and schema, evaluates the filter and the computed
// values, and renders every mapping's rows. (Being written: issue 19.)
package mapping
