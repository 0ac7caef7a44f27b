// Package model is a model-based test of the whole job lifecycle.
package model
