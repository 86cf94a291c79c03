/*
 * retrysafe's claim / lease / fence protocol for one Idempotency-Key,
 * as SPIN explores it: every interleaving of N clients retrying the key,
 * M owner processes (gateways) that crash or lose the store, the store's
 * atomic operations, a discrete clock, and an upstream that counts effects.
 *
 * spec/README.md maps every name here to the Go code and says how to run
 * it. The names of states and operations are store.go's; the transitions
 * are those of storeStep in internal/torture/linear.go (a test replays
 * simulations of this model against it).
 *
 * Options (spin -DNAME=value): N, M, R, MAXT, CRASHES, OUTAGES, CUTS,
 * FAILS, CHECKPOINTS, POLICY (TAKEOVER, BLOCK, RESOLVER), COMPLETER_RUNS,
 * UNFENCED_UPSTREAM, ONLY (check one property), and the mutations
 * MUT_NOFENCE, MUT_CHECKINSERT, MUT_EARLYTAKEOVER, MUT_NOTOKEN, MUT_NORETIRE,
 * MUT_ANYMARK.
 */

#ifndef N
#define N 2		/* clients, each retrying the one key */
#endif
#ifndef M
#define M 2		/* owner processes (gateways); 1 to 3 */
#endif
#ifndef R
#define R 2		/* requests per client: the first and its retries */
#endif
#ifndef MAXT
#define MAXT 5		/* ticks during which requests, claims and renewals happen */
#endif
#ifndef CRASHES
#define CRASHES 1	/* owner crashes, in all */
#endif
#ifndef OUTAGES
#define OUTAGES 1	/* store link losses (one request long), in all */
#endif
#ifndef CUTS
#define CUTS 1		/* upstream connections cut after the request was sent */
#endif
#ifndef FAILS
#define FAILS 1		/* upstream calls that fail before anything was sent */
#endif
#ifndef CHECKPOINTS
#define CHECKPOINTS 1	/* an owner may write a checkpoint while it runs */
#endif
#ifndef COMPLETER_RUNS
#define COMPLETER_RUNS 1	/* passes of the background completer (RESOLVER) */
#endif

/* Config.OnUnknown and Config.Resolver */
#define TAKEOVER 0
#define BLOCK 1
#define RESOLVER 2
#ifndef POLICY
#define POLICY TAKEOVER
#endif

#ifndef LEASE
#define LEASE 3			/* Config.Lease */
#endif
#define HEARTBEAT 1		/* Lease/3: engine.heartbeat (one tick) */
#ifndef TTL
#define TTL 3			/* Config.TTL */
#endif
#ifndef RETENTION
#define RETENTION 2		/* SweepParams.ProcessingRetention */
#endif
#define HORIZON (MAXT + LEASE + RETENTION)
#define MAXLIFE (N * R + 2)

/* Record.State; ABSENT is "no record" */
#define ABSENT 0
#define PROCESSING 1
#define COMPLETED 2

/* store operations, as show() prints them */
#define OP_CLAIM 1
#define OP_GET 2
#define OP_EXTEND 3
#define OP_COMPLETE 4
#define OP_RELEASE 5
#define OP_SWEEP 6

/* what a store call returns */
#define OK 0
#define LEASELOST 1	/* ErrLeaseLost */
#define NOTFOUND 2	/* ErrNotFound */
#define UNAVAILABLE 3	/* ErrStoreUnavailable: it may or may not have taken effect */

/* what a client gets */
#define R_RESULT 1	/* the owner's own response, stored */
#define R_REPLAY 2	/* a stored response, replayed */
#define R_RETRY 3	/* 409 in-progress / outcome-unknown, 502, 503, a reset connection */

/* The record of the key (store.go's Record). */
byte now;		/* the clock: ClaimParams.Now etc. */
byte st;		/* Record.State */
byte tok;		/* Record.Token */
byte att;		/* Record.Attempt */
byte leaseUntil;	/* Record.LeaseUntil (processing) */
byte expiresAt;		/* Record.ExpiresAt (completed) */
bool abandoned;		/* Record.Abandoned */
byte checkpoint;	/* Record.Checkpoint: the token of the attempt that wrote it, 0 = nil */
byte response;		/* Record.Response: the token of the attempt whose upstream answered */
byte marked;		/* the attempt a not-done mark is about (the checkpoint
			 * "retrysafe-not-done attempt=N", Record.ResolvedNotDone), 0 = none */

/* Ghost state: what the properties speak of; no code reads it. */
byte life;			/* the record's life: +1 when a claim creates the record */
byte effects[MAXLIFE];		/* upstream effects of the key, per life */
byte unknowns[MAXLIFE];		/* crashes and unknown outcomes of attempts of that life */
byte firstResp[MAXLIFE];	/* the response the life completed with, 0 = none yet */
byte effectResp[MAXLIFE];	/* the upstream's answer to the life's first effect */
byte notDone[MAXLIFE];		/* the upstream refuses attempts <= this (a resolver said not_done) */
int superseded;			/* bit t: token t's lease was taken over */
byte nextTok = 1;		/* tokens are fresh: ClaimParams.Token = NewToken() */
byte crashes = CRASHES;
byte outages = OUTAGES;
byte cuts = CUTS;
byte fails = FAILS;
bool holding[M];	/* owner m's heartbeat runs (engine.run, before hb.stop) */
bool up[M];		/* owner m reaches the store */
byte beatDue[M];	/* when owner m's next renewal is due */

chan req = [N] of { byte };		/* requests: the client's number */
chan rep[N] = [1] of { byte, byte };	/* replies: kind, response */

/* The properties, as assertions; -DONLY=k keeps only property k. */
#if !defined(ONLY) || ONLY == 1
#define P1_ONE_COMPLETION assert(firstResp[life] == 0)
#else
#define P1_ONE_COMPLETION skip
#endif
#if !defined(ONLY) || ONLY == 2
#define P2_COMPLETED_STABLE assert(!o_live || (st == COMPLETED && tok == o_tok && response == o_resp && expiresAt == o_exp))
#else
#define P2_COMPLETED_STABLE skip
#endif
#if !defined(ONLY) || ONLY == 3
#define P3_REPLAY_IS_RESULT assert(rresp == firstResp[rlife])
#else
#define P3_REPLAY_IS_RESULT skip
#endif
#if !defined(ONLY) || ONLY == 4
#define P4_FENCED(t) assert((superseded & (1 << t)) == 0)
#else
#define P4_FENCED(t) skip
#endif
#if !defined(ONLY) || ONLY == 5
#define P5_ONE_EFFECT assert(effects[l] <= 1)
#else
#define P5_ONE_EFFECT skip
#endif
#if !defined(ONLY) || ONLY == 6
#define P6_EFFECTS_BOUNDED assert(effects[l] <= 1 + unknowns[l])
#else
#define P6_EFFECTS_BOUNDED skip
#endif

/* P7, liveness: every claimed key eventually completes, is released or is retired. */
ltl live { [] ((st == PROCESSING) -> <> (st != PROCESSING)) }

/* P2's view of the record before a store operation. */
hidden byte o_live, o_tok, o_resp, o_exp;

inline pre() {
	o_live = (st == COMPLETED && now < expiresAt);
	o_tok = tok; o_resp = response; o_exp = expiresAt
}

inline post() {
	P2_COMPLETED_STABLE;
	o_live = 0; o_tok = 0; o_resp = 0; o_exp = 0
}

/* A record is there unless absent or completed past ExpiresAt. */
#define present (st == PROCESSING || (st == COMPLETED && now < expiresAt))

#ifdef MUT_NOFENCE
#define owns(t) (st == PROCESSING)
#else
#define owns(t) (st == PROCESSING && tok == t)
#endif

#ifdef MUT_NOTOKEN
#define mayComplete(t) present
#else
#define mayComplete(t) owns(t)
#endif

#ifdef MUT_EARLYTAKEOVER
#define leaseOver (now + 2 >= leaseUntil)
#else
#define leaseOver (now >= leaseUntil)	/* Record.LeaseExpired */
#endif

/* One line per store transition, for the replay against the porcupine model. */
#define show(op, t, nt, tt, ab, ck, r) \
	printf("STORE %d now=%d t=%d nt=%d tt=%d ab=%d ck=%d r=%d res=%d claimed=%d rec=%d,%d,%d,%d,%d,%d,%d,%d\n", \
		op, now, t, nt, tt, ab, ck, r, res, claimed, st, tok, att, leaseUntil, expiresAt, abandoned, checkpoint, response)

inline snap() {
	rst = st; rtok = tok; ratt = att; rlease = leaseUntil;
	rab = abandoned; rresp = response; rlife = life; rmark = marked
}

/* What was read is a record whose current attempt a resolver found not
 * done (Record.ResolvedNotDone): decided, so a retry takes it over. */
#ifdef MUT_ANYMARK
#define rmarked (rab)	/* the mutation: any abandoned attempt counts as resolved not done */
#else
#define rmarked (rmark != 0 && rmark == ratt)
#endif

inline fresh(t) {
	st = PROCESSING; tok = t; att = 1; leaseUntil = now + LEASE;
	expiresAt = 0; abandoned = 0; checkpoint = 0; response = 0; marked = 0
}

/* Store.Claim: an absent (or expired) key is claimed; an expired lease is
 * taken over unless NoTakeover, or TakeoverToken names another token. */
inline claim(t, nt, tt) {
	d_step {
		if
		:: now >= MAXT -> res = UNAVAILABLE; claimed = 0	/* the modelled time is over */
		:: else ->
		pre();
		if
		:: !present -> life++; fresh(t); claimed = 1
		:: st == PROCESSING && leaseOver && !nt && (tt == 0 || tt == tok) ->
			superseded = superseded | (1 << tok);
			tok = t; att++; leaseUntil = now + LEASE; abandoned = 0;
			claimed = 1
		:: else -> claimed = 0
		fi;
		post(); snap(); res = OK;
		show(OP_CLAIM, t, nt, tt, 0, 0, 0)
		fi
	}
}

#ifdef MUT_CHECKINSERT
/* The mutation: insert on what an earlier step read (seen, at acquire). */
inline claimSplit(t, nt, tt) {
	if
	:: seen && now < MAXT ->
		d_step {
			pre();
			if :: !present -> life++ :: else -> skip fi;
			fresh(t); claimed = 1;
			post(); snap(); res = OK;
			show(OP_CLAIM, t, nt, tt, 0, 0, 0)
		}
	:: else -> claim(t, nt, tt)
	fi;
	seen = 0
}
#define CLAIM(t, nt, tt) claimSplit(t, nt, tt)
#else
#define CLAIM(t, nt, tt) claim(t, nt, tt)
#endif

/* Store.Get */
inline get() {
	d_step {
		if
		:: present -> snap(); res = OK
		:: else -> res = NOTFOUND
		fi;
		show(OP_GET, 0, 0, 0, 0, 0, 0)
	}
}

/* Store.Extend: renew (heartbeat), abandon (lease left as is), checkpoint. */
inline extend(t, ab, ck) {
	d_step {
		pre();
		if
		:: owns(t) ->
			P4_FENCED(t);
			if :: ab -> abandoned = 1 :: else -> leaseUntil = now + LEASE fi;
			if :: ck -> checkpoint = t; marked = 0 :: else -> skip fi;
			res = OK
		:: else -> res = LEASELOST
		fi;
		post();
		show(OP_EXTEND, t, 0, 0, ab, ck, 0)
	}
}

/* The completer's not-done mark: Store.Extend with Abandon and the
 * checkpoint "retrysafe-not-done attempt=a", fenced by the token read (the
 * lease stays expired, the attempt number stays). To the store it is an
 * Extend with Abandon and a checkpoint. */
inline markNotDone(t, a) {
	d_step {
		pre();
		if
		:: owns(t) -> P4_FENCED(t); abandoned = 1; checkpoint = t; marked = a; res = OK
		:: else -> res = LEASELOST
		fi;
		post();
		show(OP_EXTEND, t, 0, 0, 1, 1, 0)
	}
}

/* Store.Complete */
inline complete(t, r) {
	d_step {
		pre();
		if
		:: mayComplete(t) ->
			P4_FENCED(t);
			P1_ONE_COMPLETION;
			firstResp[life] = r;
			st = COMPLETED; leaseUntil = 0; expiresAt = now + TTL;
			response = r; abandoned = 0;
			res = OK
		:: else -> res = LEASELOST
		fi;
		post();
		show(OP_COMPLETE, t, 0, 0, 0, 0, r)
	}
}

inline clear() {
	st = ABSENT; tok = 0; att = 0; leaseUntil = 0; expiresAt = 0;
	abandoned = 0; checkpoint = 0; response = 0; marked = 0
}

/* Store.Release */
inline release(t) {
	d_step {
		pre();
		if
		:: owns(t) -> P4_FENCED(t); clear(); res = OK
		:: else -> res = LEASELOST
		fi;
		post();
		show(OP_RELEASE, t, 0, 0, 0, 0, 0)
	}
}

/* A store call over owner m's link: refused while the link is down; once
 * done, its reply may be lost (the link goes down): an unknown outcome. */
#define call(op) \
	if \
	:: up[m] -> \
		op; \
		if \
		:: outages > 0 -> outages--; up[m] = 0; res = UNAVAILABLE \
		:: true -> skip \
		fi \
	:: else -> res = UNAVAILABLE \
	fi

/* This attempt's outcome became unknown (counted once per attempt). */
inline unknown() {
	if
	:: !counted -> unknowns[l]++; counted = 1
	:: else -> skip
	fi
}

#if POLICY == TAKEOVER
#define EFFECT_CHECK P6_EFFECTS_BOUNDED
#else
#define EFFECT_CHECK P5_ONE_EFFECT
#endif

#ifdef UNFENCED_UPSTREAM
#define upstreamTakes(l, a) true
#define fenceUpstream(l, a) skip
#else
#define upstreamTakes(l, a) (a > notDone[l])
#define fenceUpstream(l, a) if :: a > notDone[l] -> notDone[l] = a :: else -> skip fi	/* monotone */
#endif

/* The upstream does the request's effect (unless a resolver's not_done
 * answer fenced this attempt off). */
inline effect() {
	d_step {
		if
		:: upstreamTakes(l, a) ->
			effects[l]++;
			if :: effectResp[l] == 0 -> effectResp[l] = t :: else -> skip fi;
			EFFECT_CHECK
		:: else -> skip
		fi
	}
}

/* The resolver asks the upstream, which answers truly: done (with its
 * answer), not_done (and from then on refuses that attempt), or unknown. */
inline resolve() {
	d_step {
		if
		:: effects[rlife] > 0 -> verdict = 1; r = effectResp[rlife]
		:: effects[rlife] == 0 -> verdict = 2; fenceUpstream(rlife, ratt)
		:: true -> verdict = 3
		fi
	}
}

#define timely(i) (!holding[i] || !up[i] || beatDue[i] > now)

active proctype Clock() {
end:	do
	:: atomic {
		now < HORIZON && (now >= MAXT || (timely(0)
#if M > 1
		&& timely(1)
#endif
#if M > 2
		&& timely(2)
#endif
		)) -> now++
	}
	od
}

#ifndef MUT_NORETIRE
/* Store Sweeper: a processing record whose lease ended RETENTION ago is retired. */
active proctype Sweeper() {
	byte res, claimed;
end:	do
	:: d_step {
		st == PROCESSING && now >= leaseUntil + RETENTION ->
		pre(); clear(); post(); res = OK;
		show(OP_SWEEP, 0, 0, 0, 0, 0, 0)
	}
	od
}
#endif

proctype Client(byte c) {
	byte n, kind, resp;
	do
	:: n < R && now < MAXT -> n++; req!c; rep[c]?kind, resp; kind = 0; resp = 0
	:: n == R || now >= MAXT -> break
	od
}

/* engine.acquire, engine.run, settle, and the gateway's abandon. */
proctype Owner(byte m) {
	byte c, t, l, a, r, res, tt, loops, verdict;
	byte rst, rtok, ratt, rlease, rresp, rlife, rmark;
	bool rab, claimed, sent, counted, waited, nt, cp, lost, seen;

	up[m] = 1;
end:	do
	:: req?c ->
acquire:
#ifdef MUT_CHECKINSERT
		seen = !present;	/* the mutation's read, a step before its insert */
#endif
		atomic {	/* one step: the claim and what the engine makes of it */
		t = nextTok; nextTok++;
#if POLICY == TAKEOVER
		nt = 0;
#else
		nt = (tt == 0);
#endif
		call(CLAIM(t, nt, tt));
		tt = 0;
		if
		:: res != OK -> goto retrying
		:: else -> skip
		fi;
		if
		:: claimed && waited && ratt > 1 -> goto retrying	/* a waiter never takes over */
		:: claimed && !(waited && ratt > 1) ->
			/* engine.run starts the heartbeat with the claim */
			l = rlife; a = ratt; holding[m] = 1; beatDue[m] = now + HEARTBEAT;
			goto running
		:: !claimed && rst == COMPLETED -> goto replaying
		:: !claimed && rst == PROCESSING && rmarked && loops < 2 ->	/* decided not done: take it over */
			loops++; tt = rtok; goto acquire
		:: !claimed && rst == PROCESSING && rmarked && loops >= 2 -> goto retrying
		:: !claimed && rst == PROCESSING && !rmarked && rab -> goto retrying	/* 409 outcome-unknown */
		:: !claimed && rst == PROCESSING && !rmarked && !rab && now >= rlease ->
#if POLICY == RESOLVER
			goto resolving
#else
			goto retrying	/* block: 409 outcome-unknown */
#endif
		:: !claimed && rst == PROCESSING && !rmarked && !rab && now < rlease -> goto waiting
		fi
		};

waiting:	/* InFlightWait: re-read until completed, gone or unknown */
		if
		:: goto retrying	/* 409 in-progress: the wait timed out */
		:: loops < 1 -> atomic {
			loops++;
			call(get());
			if
			:: res == NOTFOUND -> waited = 1; goto acquire
			:: res == OK && rst == COMPLETED -> goto replaying
			:: else -> goto retrying
			fi }
		fi;

resolving:	/* Config.Resolver on an expired lease */
		if
		:: loops < 2 -> loops++
		:: else -> goto retrying
		fi;
		resolve();
		if
		:: verdict == 1 -> atomic {	/* done: Complete with the record's token, replay */
			call(complete(rtok, r));
			if
			:: res == OK -> rresp = r; goto replaying
			:: res == LEASELOST -> r = 0; goto acquire	/* it moved: re-read */
			:: else -> goto retrying
			fi }
		:: verdict == 2 -> tt = rtok; goto acquire	/* not_done: take it over, fenced by its token */
		:: else -> goto retrying				/* unknown: keep blocked */
		fi;

running:	/* engine.run: the heartbeat, the upstream call, crashes, outages */
		do
		:: atomic { holding[m] && up[m] && beatDue[m] <= now && now < MAXT ->	/* a renewal over a down link fails: left out */
			beatDue[m] = now + HEARTBEAT;
			call(extend(t, 0, 0));
			if
			:: res == LEASELOST -> holding[m] = 0	/* lose(ErrLeaseLost): the handler's context ends */
			:: else -> skip
			fi }
		:: CHECKPOINTS && !cp && now < MAXT -> cp = 1; call(extend(t, 0, 1))
		:: !up[m] -> up[m] = 1
		:: up[m] && outages > 0 -> outages--; up[m] = 0; unknown()
		:: crashes > 0 -> crashes--; unknown(); goto crashing
		:: !sent -> atomic {
			sent = 1;
			if
			:: upstreamTakes(l, a) -> effect(); r = t; break	/* the upstream answered */
			:: !upstreamTakes(l, a) -> goto abandoning	/* fenced off by a not_done: it hangs up, nothing done */
			:: cuts > 0 -> cuts--; effect(); unknown(); goto abandoning	/* cut after it was sent */
			:: fails > 0 -> fails--; goto releasing	/* failed before it was sent */
			fi }
		od;

		/* settle: hb.stop, then complete (engine.complete retries an
		 * unavailable store). The owner is timely (holding[m] keeps the
		 * clock from passing its lease) unless it crashes or loses the
		 * store: a process pause is an outage. */
		if
		:: crashes > 0 -> crashes--; unknown(); goto crashing
		:: true -> skip
		fi;
		atomic {
		holding[m] = 0;
		call(complete(t, r));
		if
		:: res == UNAVAILABLE -> up[m] = 1; call(complete(t, r))
		:: true -> skip
		fi;
		if
		:: res == OK -> rep[c]!R_RESULT, r; goto finished
		:: res == UNAVAILABLE -> unknown(); goto retrying	/* left to its lease */
		:: res == LEASELOST -> goto retrying		/* OutcomeLeaseLost */
		:: else -> goto retrying
		fi };

abandoning:	/* the gateway after a cut: Extend with Abandon */
		atomic { holding[m] = 0; call(extend(t, 1, 0)); goto retrying };

releasing:	/* nothing ran: Release, so that a retry runs it */
		atomic { holding[m] = 0; call(release(t)); goto retrying };

replaying:
		atomic { P3_REPLAY_IS_RESULT; rep[c]!R_REPLAY, rresp; goto finished };

crashing:		/* the process dies; the client sees a reset connection */
		atomic { holding[m] = 0; rep[c]!R_RETRY, 0; goto finished };

retrying:
		rep[c]!R_RETRY, 0;	/* 409, 502, 503: the client tries again */

finished:
		atomic {
			up[m] = 1; holding[m] = 0; beatDue[m] = 0;
			c = 0; t = 0; l = 0; a = 0; r = 0; res = 0; tt = 0; loops = 0; verdict = 0;
			rst = 0; rtok = 0; ratt = 0; rlease = 0; rresp = 0; rlife = 0;
			rab = 0; claimed = 0; sent = 0; counted = 0; waited = 0; nt = 0; cp = 0; lost = 0; rmark = 0
		}
	od
}

#if POLICY == RESOLVER
/* The background completer ((*Executor).ResolveStranded, the gateway's
 * sweeper): stranded records are resolved; done → Complete with their
 * token, not_done → the not-done mark with their token (the retry then
 * takes the record over as the next attempt, which the upstream admits),
 * unknown → nothing. A record already marked is skipped. */
active proctype Completer() {
	byte runs, res, r, verdict, rst, rtok, ratt, rlease, rresp, rlife, rmark;
	bool rab, claimed, counted;
	byte l;
end:	do
	:: d_step {	/* Admin's list of stranded records: one read */
		runs < COMPLETER_RUNS && st == PROCESSING && now >= leaseUntil && marked != att ->
		runs++; snap()
	};
		resolve();
		if
		:: verdict == 1 -> complete(rtok, r)
		:: verdict == 2 -> markNotDone(rtok, ratt)
		:: else -> skip
		fi;
		d_step { res = 0; r = 0; verdict = 0; rst = 0; rtok = 0; ratt = 0; rlease = 0; rresp = 0; rlife = 0; rab = 0; rmark = 0 }
	od
}
#endif

init {
	atomic {
		byte i;
		for (i : 0 .. M - 1) { run Owner(i) };
		for (i : 0 .. N - 1) { run Client(i) }
	}
}
