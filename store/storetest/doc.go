// Package storetest is the conformance suite for [retrysafe.Store]
// implementations. Every store in this repository passes it, and a
// third-party store should too: the engine's guarantees (one execution per
// key, fencing of stale owners, replay of the stored answer) hold only if
// the store keeps the rules the suite checks.
//
// Wire it into a _test.go file of the store's package:
//
//	func newStore(t *testing.T) retrysafe.Store {
//		db := openTestDB(t)             // fresh schema, prefix or file per call
//		s, err := mystore.New(db, mystore.Config{})
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(func() { s.Close() })
//		return s
//	}
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, newStore)
//	}
//
//	func TestUnavailable(t *testing.T) {
//		storetest.RunUnavailable(t, func(t *testing.T) retrysafe.Store {
//			s := newStore(t)
//			s.Close() // or point it at a port nobody listens on
//			return s
//		})
//	}
//
//	func TestShared(t *testing.T) {
//		storetest.RunShared(t, func(t *testing.T) (a, b retrysafe.Store) {
//			// two stores over independent connections to one backend
//		})
//	}
//
// # What the suite assumes
//
//   - Each call of newStore returns an empty store that no other call sees.
//     Scenarios run in parallel, each with its own store.
//   - Time comes from params.Now only. The suite starts at [Base] and moves
//     Now forward in whole seconds; it never sleeps for expiry, so a store
//     that consults its own clock fails.
//   - Optional interfaces are found by type assertion; their scenarios are
//     skipped, with a note, when the store does not implement them.
//
// # Choices the suite pins down
//
// Where the [retrysafe.Store] documentation leaves room, the suite decides:
//
//   - Completing a record keeps its Token and Attempt; UpdatedAt becomes
//     the completion's Now.
//   - A nil and an empty response body are equal; so are a nil and an
//     empty header map. Header values keep their order and every byte
//     (obs-text 0x80-0xFF included, which is not UTF-8).
//   - One [retrysafe.Sweeper.Sweep] call deletes every expired record and
//     returns the total; BatchSize bounds each statement, not the total.
//   - Sweep retires a processing record once LeaseUntil +
//     ProcessingRetention <= Now (zero: the default retention) and never
//     earlier; a negative retention is an error.
//   - The function [retrysafe.Notifier.Subscribe] returns may be called
//     more than once; the subscription outlives the context passed to
//     Subscribe and lasts until that function is called.
//   - [retrysafe.Admin.List] orders by Scope, then Key, comparing bytes;
//     a zero or negative Limit means [retrysafe.DefaultListLimit];
//     ScopeSet selects the empty scope.
//   - [retrysafe.Admin.Find] returns the records of one key ordered by
//     scope, in every scope or one, expired ones included, whatever the
//     keys around it (199 keys sorting before it included).
//   - An Extend with Abandon sets UpdatedAt (and keeps LeaseUntil); a
//     plain Extend keeps the checkpoint and the abandoned mark; a
//     completed record keeps its checkpoint; a record that starts afresh
//     (absent key, expired result) has neither.
//   - With a cancelled context a method returns an error matching
//     context.Canceled (or ErrStoreUnavailable) and changes nothing.
//
// See docs/implementing-a-store.md in the repository for the full contract.
package storetest
