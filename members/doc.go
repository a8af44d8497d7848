// Package members keeps the list of the processes that run one pipeline at
// once (replicas, the old and the new of a rolling update), in the state
// table, and tells the dedupe part which way of claiming keys is safe: the
// fast path, for a process that is provably alone, or conditional claims,
// for one that may not be. It owns the row members#PIPELINE (family m, one
// column per process) and the join handshake. It does not own the claims
// themselves (package dedupe) nor the watermark's leader (package
// watermark).
//
// The entry point is New; Run registers the process and renews its cell
// until its context ends, Joined waits for the handshake, View is read by
// dedupe before every claim, and Close removes the cell on a clean stop.
//
// # The protocol
//
// Every renewal period (lease/4, 2.5 s by default) a member:
//
//  1. writes its own cell (column = its ID, the cell timestamp its clock,
//     the value the set of members it has acknowledged), noting the time
//     it sent the write;
//  2. reads the whole row. Another member is live while its cell keeps
//     changing: a cell that has not changed for a lease (10 s by default),
//     measured on this process's own monotonic clock, has lapsed. A cell
//     seen for the first time counts as live until it has been still for a
//     lease, so a newcomer cannot miss a member that is merely slow. A
//     lapsed cell stays lapsed until it changes (its writer resumed): the
//     cell of a process that died stays in the row until it is collected,
//     and must not come back as a newcomer at every read, which would end
//     the fast path for a lease, again and again;
//  3. if a live member is not yet acknowledged, stops the fast path at once
//     (View says not alone), then writes its cell again, acknowledging it.
//
// A member is joined once every other live member's cell acknowledges it,
// or lapsed; until then it claims nothing (Joined blocks, and View says not
// joined). A joined member that keeps renewing stays joined when a newcomer
// appears that does not acknowledge it yet (so its claims do not wait for
// the newcomer's handshake): the newcomer acknowledges it in the same round
// in which it first reads it, before it can itself be joined, and cannot be
// alone while the member renews. A peer that acknowledged the member and no
// longer does unjoins it. A member is alone when the read that followed its last successful
// write showed no other live member; the fast path is then allowed until
// that write's send time plus lease minus a margin (lease/4). A member that
// cannot renew for that long loses the fast path, and its joined state: it
// must be acknowledged again before it claims, because the others may have
// judged it lapsed and gone on alone.
//
// # Why it is safe
//
// Each member writes before it reads, so of two processes starting together
// at least one sees the other. A newcomer claims nothing until every live
// member acknowledged it, and a member acknowledges only after it left the
// fast path. Package dedupe trusts a fast-path claim (an unconditional,
// batched write of the key's claim cell) only if, once the write was
// confirmed, the view still says alone: a claim confirmed before the
// member left the fast path is durable before its acknowledgement, so the
// newcomer's first conditional claim sees it; one confirmed later is
// upgraded to a conditional claim. A
// member the newcomer judged lapsed had, by then, gone a whole lease
// without a successful write on the newcomer's clock, so its own fast path
// ended a margin earlier on its clock: it makes no further fast-path claim,
// and the dedupe part does not trust a fast-path claim confirmed after the
// fast path ended (it upgrades it to a conditional claim). The decision of
// who owns a key is never made by timing: it is the conditional write on the
// key's catalog row (package dedupe). The lease bounds only how long an
// unconditional, batched fast-path claim is trusted, assuming the clocks of
// two processes run at the same rate to within the margin (a quarter).
//
// # Errors
//
// Run returns nil when its context ends: a failed renewal is logged,
// counted, and retried at the next period. Joined returns its context's
// error. Close deletes the cell, within its context.
package members
