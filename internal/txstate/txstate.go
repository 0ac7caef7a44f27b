// Package txstate tells what Begin on a database handle would do: open a
// transaction of the callee's own, or only nest inside one its caller
// already opened. A call that reports or bills what it committed must know
// the difference, and pgx's handles do not say it through the interface
// they share. And InDoubt tells whether a write that failed may have
// committed all the same.
package txstate

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// State is what Begin on a handle would do.
type State int

const (
	// Own: Begin opens a transaction of the callee's own, and its Commit
	// commits it. A pool, or a connection with no transaction open.
	Own State = iota
	// Savepoint: the handle is a pgx.Tx. Begin makes a savepoint, and
	// nothing written through it commits before the caller commits.
	Savepoint
	// Open: a connection on which a transaction is open that the handle
	// does not stand for (a plain BEGIN sent on it, or a pgx.Tx begun on it
	// and not passed). The server ignores a second BEGIN, so the callee's
	// Commit would commit the caller's transaction.
	Open
)

// Of returns db's state. A pgx.Tx is known by its type; a connection by the
// transaction status its server reported last, which is current whenever
// no other goroutine is using the connection (none may: a pgx connection is
// not safe for concurrent use). A handle of another type is taken for Own:
// Of cannot see inside it.
func Of(db any) State {
	var conn *pgx.Conn
	switch h := db.(type) {
	case pgx.Tx:
		return Savepoint
	case *pgx.Conn:
		conn = h
	case *pgxpool.Conn:
		if h != nil {
			conn = h.Conn()
		}
	}
	if conn == nil || conn.PgConn() == nil {
		return Own
	}
	if conn.PgConn().TxStatus() != 'I' { // 'T' in a transaction, 'E' in a failed one
		return Open
	}
	return Own
}

// String says what the handle is, for error messages.
func (s State) String() string {
	switch s {
	case Savepoint:
		return "a pgx.Tx, whose Begin is a savepoint that commits only with the caller's transaction"
	case Open:
		return "a connection with a transaction open, whose BEGIN the server ignores and whose COMMIT would commit the caller's transaction"
	default:
		return "a handle outside any transaction"
	}
}

// Broken reports whether no statement can run on tx any more: its
// connection is closed, or busy with a result no one will read (code
// handed tx returned, or panicked, with a query's rows still open). Not
// even a rollback to a savepoint runs then: the transaction can only be
// given up, which closes its connection.
func Broken(tx pgx.Tx) bool {
	c := tx.Conn()
	return c == nil || c.IsClosed() || c.PgConn().IsBusy()
}
