// Package names holds the test that keeps one name per concept.
//
// No exported type name is declared by two importable packages of the
// module. It has no API.
package names
