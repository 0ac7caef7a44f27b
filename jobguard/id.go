package jobguard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The spellings of a job id. A job has one id, but a caller may spell it
// in any way the id column reads as the same value: a uuid in upper case
// or in braces, an integer with a sign, leading zeros or white space
// around it. Every entry point turns the id it is given into its canonical
// spelling, the one the column prints, before it keys anything by it, so
// that two spellings are never two jobs (two ledger rows, two markers).
//
// The spellings read are those of PostgreSQL's own input functions, so
// that what the column takes for one value is one job here too:
//
//   - uuid: 32 hex digits in either case, with an optional dash after any
//     group of four, optionally in braces (uuid_in), and also after a
//     "urn:uuid:" prefix in either case (RFC 9562's URN, which
//     PostgreSQL does not read): 8-4-4-4-12 in lower case.
//   - int2, int4, int8: an optional sign and decimal digits, with white
//     space around them (space, \t, \n, \v, \f, \r), and PostgreSQL 16's
//     0x, 0o and 0b prefixes and underscores between digits, read on
//     every server version: the decimal integer without sign (unless
//     negative) or leading zeros.
//   - char(n): trailing spaces are not part of the value (the column pads
//     it, and compares without them): the value without them.
//   - text, varchar: every byte counts, white space and case included; only
//     what text cannot hold is refused: the empty id, a NUL byte, bytes
//     that are not UTF-8.
//
// Anything else is refused with ErrInvalidJobID before any SQL is sent.

// pgSpace is the white space PostgreSQL's integer input skips around the
// digits (C's isspace).
const pgSpace = " \t\n\v\f\r"

// parseInt reads s as PostgreSQL's integer input does, at the column's
// width bits. The error is strconv's: ErrRange for an integer out of the
// column's range, ErrSyntax for anything else.
func parseInt(s string, bits int) (int64, error) {
	s = strings.Trim(s, pgSpace)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return 0, strconv.ErrSyntax // one sign at most
	}
	if len(body) > 1 && body[0] == '0' && strings.IndexByte("xXoObB", body[1]) >= 0 {
		// strconv reads a base prefix, and underscores after it or
		// between digits, exactly as PostgreSQL 16 does.
		return unwrapNum(strconv.ParseInt(s, 0, bits))
	}
	// Decimal: strconv's base 10 reads no underscores, and its base 0
	// would read a leading zero as octal. An underscore must stand between
	// two digits.
	if strings.IndexByte(body, '_') >= 0 {
		for i := 0; i < len(body); i++ {
			if body[i] == '_' && (i == 0 || i == len(body)-1 || !isDigit(body[i-1]) || !isDigit(body[i+1])) {
				return 0, strconv.ErrSyntax
			}
		}
		s = strings.ReplaceAll(s, "_", "")
	}
	return unwrapNum(strconv.ParseInt(s, 10, bits))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// unwrapNum reduces a *strconv.NumError to its cause.
func unwrapNum(n int64, err error) (int64, error) {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return n, ne.Err
	}
	return n, err
}

// parseUUID reads s as PostgreSQL's uuid input does, after an optional
// "urn:uuid:" prefix, and returns it in its canonical form.
func parseUUID(s string) (string, bool) {
	s, ok := uuidBody(s)
	if !ok {
		return "", false
	}
	return uuidDigits(s)
}

// uuidBody returns s without its "urn:uuid:" prefix and its braces; ok is
// false for an opening brace that is not closed at the end.
func uuidBody(s string) (string, bool) {
	if len(s) > 9 && strings.EqualFold(s[:9], "urn:uuid:") {
		s = s[9:]
	}
	if len(s) == 0 || s[0] != '{' {
		return s, true
	}
	if len(s) < 2 || s[len(s)-1] != '}' {
		return "", false
	}
	return s[1 : len(s)-1], true
}

// uuidDigits reads s as 32 hex digits, a dash allowed after any group of
// four but the last, and returns them in the 8-4-4-4-12 form in lower
// case.
func uuidDigits(s string) (string, bool) {
	var out [36]byte
	n := 0
	for i := range 16 {
		if len(s) < 2 || !isHex(s[0]) || !isHex(s[1]) {
			return "", false
		}
		out[n], out[n+1] = lower(s[0]), lower(s[1])
		n += 2
		if i == 3 || i == 5 || i == 7 || i == 9 {
			out[n] = '-'
			n++
		}
		s = s[2:]
		// A dash may follow any group of four digits but the last.
		if len(s) > 0 && s[0] == '-' && i%2 == 1 && i < 15 {
			s = s[1:]
		}
	}
	if s != "" {
		return "", false
	}
	return string(out[:]), true
}

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func lower(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c - 'A' + 'a'
	}
	return c
}

// idArg turns a job id into the argument the id column takes, so that a
// malformed id is refused before any SQL is sent (a bad uuid inside a
// transaction would otherwise abort it). An integer is parsed at the
// column's own width: one past its range names no row, and sent on it would
// fail as a driver or server error that looks retryable.
func (g *Guard) idArg(jobID string) (any, error) {
	if jobID == "" {
		return nil, fmt.Errorf("%w: job id is empty", ErrInvalidJobID)
	}
	switch g.idKind {
	case idUUID:
		u, ok := parseUUID(jobID)
		if !ok {
			return nil, fmt.Errorf("%w: %.64q is not a uuid (column %q is uuid)", ErrInvalidJobID, jobID, g.table.IDColumn)
		}
		return u, nil
	case idInt:
		n, err := parseInt(jobID, g.idBits)
		if errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("%w: %.64q is out of range for column %q (%s)",
				ErrInvalidJobID, jobID, g.table.IDColumn, g.cat.columns[g.table.IDColumn].name)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %.64q is not an integer (column %q is an integer)", ErrInvalidJobID, jobID, g.table.IDColumn)
		}
		return n, nil
	case idChar:
		jobID = strings.TrimRight(jobID, " ")
		if jobID == "" {
			return nil, fmt.Errorf("%w: job id is blank (column %q is char(n), which drops trailing spaces)", ErrInvalidJobID, g.table.IDColumn)
		}
	}
	// The server refuses both in any text (its client encoding is always
	// UTF-8 under pgx); refused here, they never abort a transaction.
	if strings.IndexByte(jobID, 0) >= 0 || !utf8.ValidString(jobID) {
		return nil, fmt.Errorf("%w: %.64q is not UTF-8 text without NUL bytes, which column %q holds", ErrInvalidJobID, jobID, g.table.IDColumn)
	}
	return jobID, nil
}

// canonicalID is the text form of an id argument: the id as the column prints
// it, which is how markers and notices name the job.
func canonicalID(id any) string {
	if n, ok := id.(int64); ok {
		return strconv.FormatInt(n, 10)
	}
	return id.(string)
}

// CanonicalID returns jobID as the id column prints it: a uuid in lower case
// with dashes, an integer in decimal without a plus sign, leading zeros or
// white space, a char(n) value without its trailing spaces, text and
// varchar as given. It reads every spelling that PostgreSQL's input
// function for the column's type reads (and a uuid's URN form); see the
// package doc, "One job, one id". Every entry point of the library names
// a job this way in what it returns and in every key it writes or
// compares (executions, errors, markers, notices, heartbeat slots, the
// side tables' rows, reclaim reports), so that one job spelled two ways
// is still one job. An id that cannot be a value of the column returns an
// error wrapping ErrInvalidJobID.
//
// An id already in its canonical form comes back as it is, without
// allocating, so a hot path (a heartbeat) can key by it at no cost.
func (g *Guard) CanonicalID(jobID string) (string, error) {
	if g.idKind == idUUID && isLowerUUID(jobID) {
		return jobID, nil
	}
	v, err := g.idArg(jobID)
	if err != nil {
		return "", err
	}
	if n, ok := v.(int64); ok && jobID == strconv.FormatInt(n, 10) {
		return jobID, nil
	}
	return canonicalID(v), nil
}

// isLowerUUID reports whether s is a uuid as PostgreSQL prints one: lower
// case hex in the 8-4-4-4-12 form.
func isLowerUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}
