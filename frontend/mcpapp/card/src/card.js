// jobgate's approval card (MCP Apps View). It talks to nothing but its host, through the App
// API of @modelcontextprotocol/ext-apps (postMessage to the parent): the host sends the result
// of list_approvals or get_* (ui/notifications/tool-result); the card shows each open request
// (the meaning sentence, every scope field, sensitive columns marked, the scope digest) and,
// for each request the result's _meta gave it a nonce for, a comment box and Approve / Reject,
// which call decide_approval through the host (tools/call). The page's CSP allows no network.
import { App, applyDocumentTheme, applyHostStyleVariables } from "@modelcontextprotocol/ext-apps";

const META_KEY = "io.jobgate/approval-card";
const DECIDE_TOOL = "decide_approval";
const COMMENT_MAX = 1000;
const shownKeys = new Set(["dataset", "columns", "sensitive_columns", "purpose", "format", "max_rows"]);

const root = document.getElementById("root");
// drafts keeps what the person typed in each request's comment box (by job and input ID): the
// host may send a newer result at any time (a refreshed get_*, a second list_approvals), and
// re-rendering must not throw their words away.
const drafts = new Map();
const app = new App({ name: "jobgate-approval-card", version: "1" }, {}, { autoResize: true });

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

function strings(v) {
  return Array.isArray(v) ? v.map(String) : [];
}

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toISOString().slice(0, 16).replace("T", " ") + " UTC";
}

function grouped(n) {
  return typeof n === "number" ? n.toLocaleString("en-US") : String(n);
}

// jobsOf reads the jobs a result shows: a job view (get_*) or a page of rows (list_approvals).
function jobsOf(sc) {
  if (!sc || typeof sc !== "object") return [];
  if (Array.isArray(sc.jobs)) return sc.jobs;
  if (sc.job_id) return [sc];
  return [];
}

function errorText(res) {
  const t = (res && res.content || []).find((c) => c.type === "text");
  if (!t) return "the server gave no reason";
  try {
    const e = JSON.parse(t.text);
    return e.message ? `${e.message} (${e.code})` : t.text;
  } catch {
    return t.text;
  }
}

// meaningParts renders the meaning sentence: the job writes what is sensitive as **this**,
// shown strong and marked, as the approval page shows it.
function meaningParts(text) {
  return text.split("**").map((part, i) => (i % 2 === 1 ? el("strong", { class: "sensitive" }, part) : part));
}

function columnsList(cols, sensitive) {
  return el("ul", { class: "cols" }, cols.map((c) =>
    sensitive.has(c)
      ? el("li", { class: "sensitive", "data-sensitive": "true" }, el("strong", {}, c), " ", el("span", { class: "tag" }, "sensitive"))
      : el("li", {}, c)));
}

function decisionLine(d) {
  if (!d) return null;
  return el("p", { class: "ok", role: "status" },
    `${d.decision === "approve" ? "Approved" : "Rejected"} by ${d.by} on the ${d.surface} surface, ${when(d.at)}`,
    d.comment ? ` — “${d.comment}”` : "");
}

function renderJob(job, nonce) {
  const ni = job.needs_input;
  const sec = el("section", { class: "card", "data-job": job.job_id, "aria-label": `Approval for ${job.job_id}` });
  sec.append(el("h2", {}, ni ? `${job.kind === "export" ? "Export" : "Job"} awaiting approval` : `${job.kind} job`));
  if (!ni) {
    sec.append(el("p", { class: "status" }, `Nothing waits for approval: the job is ${String(job.status).replace("_", " ")}.`));
    const d = job.decision || (job.result && job.result.decision);
    if (d) sec.append(decisionLine(d));
    return sec;
  }
  const scope = ni.scope || {};
  const sensitive = new Set(strings(scope.sensitive_columns));
  sec.append(el("h3", {}, "What approving means"));
  sec.append(el("p", { class: "meaning" }, meaningParts(String(ni.prompt || ""))));
  const dl = el("dl", {});
  const row = (k, v) => { if (v !== undefined && v !== null && v !== "") dl.append(el("dt", {}, k), el("dd", {}, v)); };
  row("Asked by", ni.requested_by || job.owner);
  row("Kind", job.kind);
  row("Dataset", scope.dataset);
  if (scope.columns) row("Columns", columnsList(strings(scope.columns), sensitive));
  if (scope.max_rows) row("Rows at most", grouped(scope.max_rows));
  row("Format", scope.format);
  if (scope.purpose) row("Purpose (the requester's words)", scope.purpose);
  for (const k of Object.keys(scope).sort()) {
    if (shownKeys.has(k)) continue;
    const v = scope[k];
    row(k, el("code", {}, typeof v === "object" ? JSON.stringify(v) : String(v)));
  }
  row("Expires", when(ni.expires_at));
  row("Scope digest", el("code", { class: "digest" }, ni.scope_digest));
  row("Job", el("code", {}, job.job_id));
  sec.append(dl);
  if (!nonce) {
    const who = ni.approver === "approver"
      ? "It waits for an approver other than the job's owner (four eyes); you cannot decide it here."
      : "You cannot decide this request here.";
    sec.append(el("p", { class: "note", role: "note" }, who));
    return sec;
  }
  sec.append(decideForm(job, ni, nonce, sensitive.size > 0));
  return sec;
}

function decideForm(job, ni, nonce, isSensitive) {
  const id = `comment-${Math.random().toString(36).slice(2)}`;
  const box = el("textarea", { id, name: "comment", rows: 3, maxlength: COMMENT_MAX });
  const draftKey = `${job.job_id}\u0000${ni.input_id}`;
  box.value = drafts.get(draftKey) || "";
  box.addEventListener("input", () => drafts.set(draftKey, box.value));
  const msg = el("p", { class: "msg", role: "alert", hidden: true });
  // Plain buttons, not a submit: a host's sandbox need not allow forms (without allow-forms a
  // frame gets no submit event at all), and nothing here is ever posted anywhere.
  const approve = el("button", { type: "button", name: "decision", value: "approve", class: "approve" }, "Approve");
  const reject = el("button", { type: "button", name: "decision", value: "reject", class: "reject" }, "Reject");
  const form = el("form", { class: "decide", "aria-label": "Your decision" },
    el("h3", {}, "Your decision"),
    isSensitive ? el("p", {}, "This scope includes sensitive columns: approving needs a recent sign-in.") : null,
    el("label", { for: id }, "Comment (required to reject)"), box, msg,
    el("p", { class: "buttons" }, approve, " ", reject));
  form.addEventListener("submit", (ev) => ev.preventDefault()); // Enter in a field: nothing
  const send = async (decision) => {
    const comment = box.value.trim();
    const say = (text, cls) => { msg.textContent = text; msg.className = `msg ${cls}`; msg.hidden = false; };
    if (decision !== "approve" && decision !== "reject") return say("Choose Approve or Reject.", "warn");
    if (decision === "reject" && !comment) return say("A comment is required to reject: tell the requester why.", "warn");
    approve.disabled = reject.disabled = true;
    say("Sending your decision…", "pending");
    let res;
    try {
      res = await app.callServerTool({ name: DECIDE_TOOL, arguments: { handle: job.handle, input_id: ni.input_id,
        scope_digest: ni.scope_digest, decision, comment, nonce } });
    } catch (e) {
      approve.disabled = reject.disabled = false;
      return say(`Your decision was not sent: ${e && e.message || e}`, "warn");
    }
    if (res.isError) {
      approve.disabled = reject.disabled = false;
      return say(`Not decided: ${errorText(res)}`, "warn");
    }
    drafts.delete(`${job.job_id}\u0000${ni.input_id}`);
    const after = res.structuredContent || {};
    const verb = decision === "approve" ? "Approved" : "Rejected";
    const h2 = form.closest("section") && form.closest("section").querySelector("h2");
    if (h2) h2.textContent = `${job.kind === "export" ? "Export" : "Job"} ${verb.toLowerCase()}`;
    form.replaceChildren(el("p", { class: "ok", role: "status", "data-decided": decision },
      `${verb}. The job is now ${String(after.status || "updated").replace("_", " ")}.`));
  };
  approve.addEventListener("click", () => send("approve"));
  reject.addEventListener("click", () => send("reject"));
  return form;
}

function render(result) {
  const meta = (result && result._meta && result._meta[META_KEY]) || {};
  const nonces = meta.nonces || {};
  const jobs = jobsOf(result && result.structuredContent);
  const active = document.activeElement;
  const focused = active && active.tagName === "TEXTAREA" && active.closest("section[data-job]")
    ? active.closest("section[data-job]").getAttribute("data-job") : null;
  root.replaceChildren();
  if (result && result.isError) {
    root.append(el("p", { class: "warn", role: "alert" }, errorText(result)));
    return;
  }
  if (jobs.length === 0) {
    root.append(el("p", { class: "status" }, "Nothing waits for your approval."));
    return;
  }
  for (const job of jobs) root.append(renderJob(job, nonces[job.job_id]));
  // Typing continues where it was: the box that had the focus gets it back, caret at the end.
  if (focused) {
    const box = root.querySelector(`section[data-job="${CSS.escape(focused)}"] textarea`);
    if (box) { box.focus(); box.setSelectionRange(box.value.length, box.value.length); }
  }
}

function applyContext(ctx) {
  if (!ctx) return;
  if (ctx.theme) applyDocumentTheme(ctx.theme);
  if (ctx.styles && ctx.styles.variables) applyHostStyleVariables(ctx.styles.variables);
}

app.ontoolresult = (result) => render(result);
app.onhostcontextchanged = (ctx) => applyContext(ctx);
app.onteardown = async () => ({});
app.connect().then(() => applyContext(app.getHostContext())).catch((e) => {
  root.replaceChildren(el("p", { class: "warn", role: "alert" }, `The approval card could not reach its host: ${e && e.message || e}`));
});
