package postgres

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The batch function takes one array per argument, one element per
// operation. Building them as Go slices ([]string, [][]byte, []*int32) and
// letting pgx encode those costs an allocation per element: pgx reads a
// slice's elements as interface values (each string or []byte boxed,
// []*int32 and [][]byte read by reflection). opArray instead presents one
// field of the batch's operations as an array whose elements are the
// operations themselves, each as a pointer of a type that pgx encodes
// through its TextValuer, Int64Valuer or BytesValuer interface: a pointer
// in an interface is not boxed, and the value is read from the operation
// without reflection. So a batch's arguments are encoded straight from its
// operations, and the batchArgs holding them is reused from batch to
// batch.
//
// pgx encodes such an array only when it knows the parameter's type from
// the statement's description (its exec modes cache_statement,
// cache_describe and describe_exec). In the modes that guess the types
// from the Go values (exec, simple_protocol) the store passes plain
// slices (see batchArgs.slices).

// opArray is one argument array of a batch: one field of each operation.
// It implements pgtype.ArrayGetter.
type opArray struct {
	args *batchArgs
	elem func(*batchOp) any // the operation as the pointer type that encodes the field
}

func (a *opArray) Dimensions() []pgtype.ArrayDimension { return a.args.dims[:] }
func (a *opArray) Index(i int) any                     { return a.elem(a.args.ops[i]) }
func (a *opArray) IndexType() any                      { return a.elem(&batchOp{}) }

// The element types: a *batchOp seen as the one field it encodes.
type (
	opKindField        batchOp
	opScopeField       batchOp
	opKeyField         batchOp
	opFingerprintField batchOp
	opTokenField       batchOp
	opNowField         batchOp
	opUntilField       batchOp
	opStatusField      batchOp
	opHeaderField      batchOp
	opBodyField        batchOp
	opPayloadField     batchOp
	opRouteField       batchOp
	opNoTakeoverField  batchOp
	opTakeoverField    batchOp
	opAbandonField     batchOp
	opCPNameField      batchOp
	opCPDataField      batchOp
)

func textValue(s string) (pgtype.Text, error) { return pgtype.Text{String: s, Valid: true}, nil }
func int8Value(n int64) (pgtype.Int8, error)  { return pgtype.Int8{Int64: n, Valid: true}, nil }
func boolValue(b bool) (pgtype.Bool, error)   { return pgtype.Bool{Bool: b, Valid: true}, nil }

func (o *opKindField) TextValue() (pgtype.Text, error)        { return textValue(string(o.kind)) }
func (o *opScopeField) TextValue() (pgtype.Text, error)       { return textValue(o.scope) }
func (o *opKeyField) TextValue() (pgtype.Text, error)         { return textValue(o.key) }
func (o *opFingerprintField) TextValue() (pgtype.Text, error) { return textValue(o.fingerprint) }
func (o *opTokenField) TextValue() (pgtype.Text, error)       { return textValue(o.token) }
func (o *opPayloadField) TextValue() (pgtype.Text, error)     { return textValue(o.payload) }
func (o *opRouteField) TextValue() (pgtype.Text, error)       { return textValue(o.route) }
func (o *opNowField) Int64Value() (pgtype.Int8, error)        { return int8Value(o.now) }
func (o *opUntilField) Int64Value() (pgtype.Int8, error)      { return int8Value(o.until) }
func (o *opNoTakeoverField) BoolValue() (pgtype.Bool, error)  { return boolValue(o.noTakeover) }
func (o *opTakeoverField) TextValue() (pgtype.Text, error)    { return textValue(o.takeoverToken) }
func (o *opAbandonField) BoolValue() (pgtype.Bool, error)     { return boolValue(o.abandon) }

// TextValue is the checkpoint's name, NULL when the operation has none.
func (o *opCPNameField) TextValue() (pgtype.Text, error) {
	if !o.hasCheckpoint {
		return pgtype.Text{}, nil
	}
	return textValue(o.cpName)
}

// BytesValue is the checkpoint's data (a nil slice: NULL).
func (o *opCPDataField) BytesValue() ([]byte, error) { return o.cpData, nil }

// Int64Value is the status, NULL when the operation has none.
func (o *opStatusField) Int64Value() (pgtype.Int8, error) {
	if o.status == nil {
		return pgtype.Int8{}, nil
	}
	return int8Value(int64(*o.status))
}

// BytesValue is the header (a nil slice: NULL).
func (o *opHeaderField) BytesValue() ([]byte, error) { return o.header, nil }

// BytesValue is the body (a nil slice: NULL).
func (o *opBodyField) BytesValue() ([]byte, error) { return o.body, nil }

// batchColumns are the arrays of the batch function's arguments in its
// order, the notify channel (argument 12) left out: the first 11 come
// before it, the rest after.
var batchColumns = [...]func(*batchOp) any{
	func(o *batchOp) any { return (*opKindField)(o) },
	func(o *batchOp) any { return (*opScopeField)(o) },
	func(o *batchOp) any { return (*opKeyField)(o) },
	func(o *batchOp) any { return (*opFingerprintField)(o) },
	func(o *batchOp) any { return (*opTokenField)(o) },
	func(o *batchOp) any { return (*opNowField)(o) },
	func(o *batchOp) any { return (*opUntilField)(o) },
	func(o *batchOp) any { return (*opStatusField)(o) },
	func(o *batchOp) any { return (*opHeaderField)(o) },
	func(o *batchOp) any { return (*opBodyField)(o) },
	func(o *batchOp) any { return (*opPayloadField)(o) },
	func(o *batchOp) any { return (*opRouteField)(o) },
	func(o *batchOp) any { return (*opNoTakeoverField)(o) },
	func(o *batchOp) any { return (*opTakeoverField)(o) },
	func(o *batchOp) any { return (*opAbandonField)(o) },
	func(o *batchOp) any { return (*opCPNameField)(o) },
	func(o *batchOp) any { return (*opCPDataField)(o) },
}

// batchArgs holds what runBatch builds for one batch, reused through the
// Store's pool of them.
type batchArgs struct {
	index   []int      // position in the arrays -> item of the batch
	ops     []*batchOp // the operations sent, in array order
	results []batchResult
	seen    map[scopeKey]bool // key -> a later operation of the batch has it too
	dims    [1]pgtype.ArrayDimension
	arrays  [len(batchColumns)]opArray
	params  []any
	row     *batchRow // the destinations of the answer's rows
}

// scopeKey identifies a record.
type scopeKey struct{ scope, key string }

func newBatchArgs() *batchArgs {
	a := &batchArgs{seen: make(map[scopeKey]bool), params: make([]any, 0, len(batchColumns)+1), row: newBatchRow()}
	for i, elem := range batchColumns {
		a.arrays[i] = opArray{args: a, elem: elem}
	}
	return a
}

// reset empties a for the next batch, keeping its memory; it drops the
// pointers to the last batch's operations.
func (a *batchArgs) reset() {
	clear(a.ops)
	clear(a.results)
	clear(a.params)
	clear(a.seen)
	a.row.release()
	a.index, a.ops, a.results, a.params = a.index[:0], a.ops[:0], a.results[:0], a.params[:0]
}

// arguments returns the batch function's arguments for a.ops: the arrays
// over the operations, or plain slices when the pool's exec mode does not
// describe statements.
func (a *batchArgs) arguments(mode pgx.QueryExecMode, channel string) []any {
	a.dims[0] = pgtype.ArrayDimension{Length: int32(len(a.ops)), LowerBound: 1}
	// The channel is argument 12, between the payloads and the routes.
	switch mode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec:
		for i := range a.arrays {
			if i == 11 {
				a.params = append(a.params, channel)
			}
			a.params = append(a.params, &a.arrays[i])
		}
	default:
		s := a.slices()
		a.params = append(append(append(a.params, s[:11]...), channel), s[11:]...)
	}
	return a.params
}

// slices returns the arrays as Go slices, for the exec modes in which pgx
// infers a parameter's type from its Go value.
func (a *batchArgs) slices() []any {
	n := len(a.ops)
	var (
		ops, scopes, keys, fps, tokens = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		nows, untils                   = make([]int64, n), make([]int64, n)
		statuses                       = make([]*int32, n)
		headers, bodies                = make([][]byte, n), make([][]byte, n)
		payloads, routes               = make([]string, n), make([]string, n)
		noTakeovers, abandons          = make([]bool, n), make([]bool, n)
		takeoverTokens                 = make([]string, n)
		cpNames                        = make([]*string, n)
		cpData                         = make([][]byte, n)
	)
	for i, o := range a.ops {
		ops[i], scopes[i], keys[i], fps[i], tokens[i] = string(o.kind), o.scope, o.key, o.fingerprint, o.token
		nows[i], untils[i], statuses[i], headers[i], bodies[i] = o.now, o.until, o.status, o.header, o.body
		payloads[i], routes[i] = o.payload, o.route
		noTakeovers[i], takeoverTokens[i], abandons[i], cpData[i] = o.noTakeover, o.takeoverToken, o.abandon, o.cpData
		if o.hasCheckpoint {
			cpNames[i] = &o.cpName
		}
	}
	return []any{ops, scopes, keys, fps, tokens, nows, untils, statuses, headers, bodies, payloads, routes,
		noTakeovers, takeoverTokens, abandons, cpNames, cpData}
}
