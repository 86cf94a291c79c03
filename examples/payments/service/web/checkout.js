// Checkout page of the retrysafe payments example. No build step.
//
// The rules of a client that retries safely:
//   - create the Idempotency-Key before the first attempt (when the form renders);
//   - send the same key on every retry of the same operation;
//   - create a new key only for a new operation;
//   - never take a lost response or a timeout as proof that nothing happened.
"use strict";

const $ = (id) => document.getElementById(id);
const form = $("checkout"), payButton = $("pay"), againButton = $("again"), flaky = $("flaky");

function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const state = { orderKey: "", payKey: "", orderId: "", requests: 0 };

// render prepares a new operation: new keys, made before anything is sent.
function render() {
  state.orderKey = newKey();
  state.payKey = newKey();
  state.orderId = "";
  $("pay-key").textContent = state.payKey;
  $("order-id").textContent = "not created yet";
  $("payment-id").textContent = "—";
  $("log").replaceChildren();
  state.requests = 0;
  countRequest(0);
  payButton.disabled = false;
  payButton.textContent = "Pay";
  againButton.hidden = true;
  show("idle", "Ready to pay", "Nothing has been sent yet.");
}

function show(kind, title, detail) {
  $("status").dataset.state = kind;
  $("status-title").textContent = title;
  $("status-detail").textContent = detail;
}

function log(text, cls) {
  const li = document.createElement("li");
  li.textContent = text;
  if (cls) li.className = cls;
  $("log").append(li);
}

function countRequest(n) {
  state.requests += n;
  $("attempts").textContent = String(state.requests);
  $("attempts").dataset.count = String(state.requests);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// post sends one operation, retrying with the same key until it gets an
// answer that is not "still in progress". With the flaky switch on, the
// first attempt asks the server to lose its answer (X-Simulate-Drop): the
// operation runs, the response never arrives, and the retry gets the stored
// answer (Idempotent-Replayed: true).
async function post(path, body, key) {
  for (let attempt = 1; attempt <= 10; attempt++) {
    const headers = { "Content-Type": "application/json", "Idempotency-Key": key };
    const drop = flaky.checked && attempt === 1;
    if (drop) headers["X-Simulate-Drop"] = "1";
    countRequest(1);
    let resp;
    try {
      resp = await fetch(path, { method: "POST", headers, body: JSON.stringify(body) });
    } catch (e) {
      log(`POST ${path} #${attempt}: response lost (${e.message}); retrying with the same key`, "lost");
      await sleep(300 * attempt);
      continue;
    }
    const replayed = resp.headers.get("Idempotent-Replayed") === "true";
    const data = await resp.json().catch(() => ({}));
    if (resp.status === 409 && String(data.type || "").endsWith("/request-in-progress")) {
      log(`POST ${path} #${attempt}: 409 still in progress; retrying with the same key`);
      await sleep(300 * attempt);
      continue;
    }
    if (resp.status === 503 || resp.status === 502 || resp.status === 504) {
      log(`POST ${path} #${attempt}: ${resp.status}; retrying with the same key`);
      await sleep(300 * attempt);
      continue;
    }
    log(`POST ${path} #${attempt}: ${resp.status}${replayed ? " (replayed: the stored answer)" : ""}`, replayed ? "replayed" : "");
    return { status: resp.status, data, replayed };
  }
  throw new Error("no answer after 10 attempts; the operation may have happened — check the order before paying again");
}

async function poll(id) {
  for (let i = 0; i < 120; i++) {
    const resp = await fetch(`/payments/${encodeURIComponent(id)}`, { cache: "no-store" });
    const p = await resp.json();
    if (p.status === "succeeded" || p.status === "failed" || p.status === "refunded") return p;
    show(p.status, `Payment ${p.status}`, p.status === "unknown"
      ? "The provider's answer was lost. Reconciliation will settle it; nothing is charged twice."
      : "The provider is slow; waiting for its answer.");
    await sleep(500);
  }
  return null;
}

function final(p) {
  $("payment-id").textContent = p.id;
  if (p.status === "succeeded") {
    show("succeeded", "Payment succeeded", `${(p.amount / 100).toFixed(2)} ${p.currency} charged once — charge ${p.chargeId}, payment ${p.id}.`);
    payButton.textContent = "Paid";
    againButton.hidden = false;
  } else {
    show("failed", `Payment ${p.status}`, p.failure || "The payment did not go through.");
    state.payKey = newKey(); // a new attempt is a new operation
    $("pay-key").textContent = state.payKey;
    payButton.disabled = false;
  }
}

form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  if (payButton.disabled) return;
  payButton.disabled = true; // one request at a time: a double click sends nothing more
  const amount = Math.round(parseFloat($("amount").value) * 100);
  const currency = $("currency").value;
  try {
    show("working", "Paying…", "Sending the payment.");
    if (!state.orderId) {
      const o = await post("/orders", { amount, currency }, state.orderKey);
      if (o.status !== 201) throw new Error(o.data.title || `order: ${o.status}`);
      state.orderId = o.data.id;
      $("order-id").textContent = state.orderId;
    }
    const r = await post("/payments", { orderId: state.orderId, amount, currency }, state.payKey);
    if (r.status === 201) return final(r.data);
    if (r.status === 202) {
      $("payment-id").textContent = r.data.id;
      const p = await poll(r.data.id);
      if (p) return final(p);
      show("unknown", "Payment outcome unknown", "Still waiting for reconciliation; check the order later.");
      return;
    }
    show("error", r.data.title || `Error ${r.status}`, r.data.detail || "");
    if (r.status !== 409) { state.payKey = newKey(); $("pay-key").textContent = state.payKey; }
    payButton.disabled = r.data.type && r.data.type.endsWith("/order-already-paid");
  } catch (e) {
    show("error", "Could not pay", e.message);
    payButton.disabled = false; // same keys: a retry is the same operation
  }
});

againButton.addEventListener("click", render);
render();
