// The page for people: a form built from the task's input JSON Schema, bars from the decision.
"use strict";

const $ = (id) => document.getElementById(id);
let current = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function call(path, body) {
  const response = await fetch(path, body === undefined ? { headers: headers() }
    : { method: "POST", headers: headers(), body: JSON.stringify(body) });
  const data = await response.json().catch(() => ({ title: response.statusText }));
  if (!response.ok) {
    const lines = [`${response.status} ${data.title || ""}: ${data.detail || ""}`];
    for (const e of data.errors || []) lines.push(`  ${e.loc}: ${e.msg}`);
    throw new Error(lines.join("\n"));
  }
  return data;
}

function showError(error) {
  $("error").textContent = error ? String(error.message || error) : "";
  $("error").hidden = !error;
}

function resolve(schema, root) {
  if (schema && schema.$ref) return resolve(root.$defs[schema.$ref.split("/").pop()], root);
  if (schema && schema.anyOf) {
    const inner = schema.anyOf.find((s) => s.type !== "null");
    return { ...resolve(inner, root), nullable: true, description: schema.description };
  }
  return schema || {};
}

function inputFor(name, schema) {
  if (schema.enum) {
    const select = document.createElement("select");
    for (const value of schema.enum) select.add(new Option(String(value), JSON.stringify(value)));
    select.dataset.kind = "json";
    return select;
  }
  const kinds = { boolean: "checkbox", integer: "number", number: "number" };
  if (schema.type in kinds) {
    const input = document.createElement("input");
    input.type = kinds[schema.type];
    input.dataset.kind = schema.type;
    return input;
  }
  if (schema.type === "string") {
    const area = document.createElement("textarea");
    area.dataset.kind = "string";
    return area;
  }
  const area = document.createElement("textarea");
  area.dataset.kind = "json";
  area.placeholder = "JSON";
  return area;
}

function buildForm(detail) {
  const root = detail.input_schema;
  const box = $("fields");
  box.replaceChildren();
  for (const [name, raw] of Object.entries(root.properties || {})) {
    const schema = resolve(raw, root);
    const label = document.createElement("label");
    label.textContent = name + " ";
    const hint = document.createElement("span");
    hint.className = "hint";
    hint.textContent = raw.description || schema.description || "";
    label.append(hint);
    const input = inputFor(name, schema);
    input.name = name;
    input.id = "field-" + name;
    label.htmlFor = input.id;
    box.append(label, input);
  }
}

function readForm() {
  const data = {};
  for (const input of $("fields").querySelectorAll("[name]")) {
    const kind = input.dataset.kind;
    if (kind === "boolean") data[input.name] = input.checked;
    else if (input.value === "") continue;
    else if (kind === "integer" || kind === "number") data[input.name] = Number(input.value);
    else if (kind === "json") data[input.name] = JSON.parse(input.value);
    else data[input.name] = input.value;
  }
  return data;
}

function fieldValue(field, value) {
  let v = value;
  for (const part of field.name.split(".")) v = v == null ? v : v[part];
  return v;
}

function chosenKeys(field, value) {
  const v = fieldValue(field, value);
  const asKey = (x) => (typeof x === "string" ? x : JSON.stringify(x));
  return new Set(field.kind === "multilabel" ? (v || []).map(asKey) : [asKey(v)]);
}

function renderDecision(detail, answer) {
  const box = $("decision");
  box.replaceChildren();
  for (const field of detail.fields) {
    const section = document.createElement("div");
    section.className = "field";
    section.dataset.field = field.name;
    const title = document.createElement("h3");
    title.textContent = field.name;
    const outcome = answer.outcomes[field.name];
    if (outcome) {
      const tag = document.createElement("span");
      tag.className = "outcome " + (outcome.abstained ? "abstained" : "answered");
      let text = outcome.abstained ? "abstained" : "answered";
      text += ` · confidence ${(100 * outcome.confidence).toFixed(1)}%`;
      if (outcome.threshold != null) text += ` (threshold ${(100 * outcome.threshold).toFixed(0)}%)`;
      if (outcome.prediction_set) text += ` · set ${JSON.stringify(outcome.prediction_set)}`;
      tag.textContent = text;
      title.append(tag);
    }
    section.append(title);
    if (field.kind === "text") {
      const text = document.createElement("p");
      text.className = "text-value";
      text.textContent = fieldValue(field, answer.value);
      section.append(text);
      box.append(section);
      continue;
    }
    const chosen = chosenKeys(field, answer.value);
    for (const [key, p] of Object.entries(answer.probs[field.name])) {
      const row = document.createElement("div");
      row.className = "bar-row" + (chosen.has(key) ? " chosen" : "");
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = key;
      const bar = document.createElement("div");
      bar.className = "bar";
      const fill = document.createElement("span");
      fill.style.width = (100 * p).toFixed(1) + "%";
      bar.append(fill);
      const value = document.createElement("span");
      value.className = "p";
      value.textContent = (100 * p).toFixed(1) + "%";
      row.append(name, bar, value);
      section.append(row);
    }
    box.append(section);
  }
  const u = answer.usage;
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "es"}`;
  const generated = u.generation_passes ? ` · ${plural(u.generation_passes, "generation pass")} wrote ` +
    `${u.generated_tokens} tokens, ${u.accepted_length.toFixed(2)} per target pass` : "";
  $("usage").textContent = `${u.input_tokens} input tokens · ${plural(u.decision_passes, "decision pass")}` +
    `${generated} · ` +
    `queued ${u.queue_ms.toFixed(1)} ms · computed ${u.compute_ms.toFixed(1)} ms · model ${answer.model.model_id}` +
    (answer.model.calibrated ? " (calibrated)" : " (not calibrated)");
  $("answer").hidden = false;
}

async function selectTask(name) {
  showError(null);
  $("answer").hidden = true;
  current = await call("/v1/tasks/" + encodeURIComponent(name));
  $("task-description").textContent = current.description;
  buildForm(current);
}

async function start() {
  try {
    const { tasks } = await call("/v1/tasks");
    for (const t of tasks) $("task").add(new Option(t.name, t.name));
    if (tasks.length) await selectTask(tasks[0].name);
  } catch (error) {
    showError(error);
  }
}

$("task").addEventListener("change", (e) => selectTask(e.target.value).catch(showError));
$("api-key").addEventListener("change", () => { if (!$("task").options.length) start(); });
$("input-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  showError(null);
  try {
    const answer = await call("/v1/decide/" + encodeURIComponent(current.name), { input: readForm() });
    renderDecision(current, answer);
  } catch (error) {
    showError(error);
  }
});
start();
