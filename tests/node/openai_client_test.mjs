// The official `openai` npm client against the gateway of a real `atrium dev`:
// what a tenant's SDK does, streaming and not, and the errors it maps.
// Run: node --test tests/node/openai_client_test.mjs  (ATRIUM_BIN = the binary)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';

const BIN = process.env.ATRIUM_BIN ?? 'build/apps/atrium/atrium';
const MODEL = 'llama-3.1-8b-instruct';

let dev;
let dataDir;
let apiUrl;
let gatewayUrl;
let demoKey;
let client;

function startDev() {
  return new Promise((resolve, reject) => {
    dev = spawn(BIN, ['dev', '--data', dataDir, '--api-listen', '127.0.0.1:0',
                      '--gateway-listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let started = false;
    const timer = setTimeout(() => reject(new Error('atrium dev did not start:\n' + out)), 30000);
    dev.stdout.on('data', (d) => {
      out += d;
      if (started) return;
      const api = out.match(/^API: (\S+)$/m);
      const gw = out.match(/^Gateway: (\S+)$/m);
      const key = out.match(/^Demo tenant key: (\S+)/m);
      if (api && gw && key) {
        started = true;
        clearTimeout(timer);
        apiUrl = api[1];
        gatewayUrl = gw[1];
        demoKey = readFileSync(key[1], 'utf8').trim();
        resolve();
      }
    });
    dev.stderr.on('data', (d) => { out += d; });
    dev.on('exit', (code) => {
      if (!started) reject(new Error(`atrium dev exited ${code}:\n${out}`));
    });
  });
}

before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'atrium-openai-'));
  await startDev();
  client = new OpenAI({ baseURL: gatewayUrl + '/v1', apiKey: demoKey, maxRetries: 0 });
});

after(async () => {
  // Until it has exited, atrium dev may still write its data (the journal,
  // the saved policy): remove the directory only then.
  if (dev && dev.exitCode === null && dev.signalCode === null) {
    const exited = new Promise((resolve) => dev.once('exit', resolve));
    dev.kill('SIGTERM');
    await exited;
  }
  rmSync(dataDir, { recursive: true, force: true });
});

test('lists the models the caller may use', async () => {
  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  assert.ok(ids.includes(MODEL), `models: ${ids}`);
});

test('chat completion without streaming', async () => {
  const r = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: 'Say hello to the gateway test.' }],
    max_tokens: 12,
  });
  assert.equal(r.object, 'chat.completion');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.equal(r.usage.completion_tokens, 12);
  assert.ok(r.usage.prompt_tokens > 0);
});

test('streamed chat completion arrives chunk by chunk, usage only when asked', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: 'Stream me eight tokens.' }],
    max_tokens: 8,
    stream: true,
  });
  let contentChunks = 0;
  let usageChunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) usageChunks += 1;
    if (chunk.choices.length > 0 && chunk.choices[0].delta?.content) contentChunks += 1;
  }
  assert.equal(contentChunks, 8);
  assert.equal(usageChunks, 0, 'the gateway asked for usage itself; the client did not');

  const withUsage = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: 'Stream me five tokens with usage.' }],
    max_tokens: 5,
    stream: true,
    stream_options: { include_usage: true },
  });
  let usage;
  for await (const chunk of withUsage) if (chunk.usage) usage = chunk.usage;
  assert.ok(usage, 'a usage chunk');
  assert.equal(usage.completion_tokens, 5);
});

test('legacy completions and embeddings', async () => {
  const c = await client.completions.create({ model: MODEL, prompt: 'Once upon', max_tokens: 4 });
  assert.ok(c.choices[0].text.length > 0);
  const e = await client.embeddings.create({ model: MODEL, input: ['a', 'b'] });
  assert.equal(e.data.length, 2);
  assert.ok(e.data[0].embedding.length > 0);
});

test('the Responses API, whole and streamed, with the SDK its users now default to', async () => {
  const r = await client.responses.create({
    model: MODEL,
    instructions: 'Be brief.',
    input: 'Say hello to the gateway test.',
    max_output_tokens: 9,
  });
  assert.equal(r.object, 'response');
  assert.ok(r.output_text.length > 0, JSON.stringify(r));
  assert.equal(r.usage.output_tokens, 9);
  assert.ok(r.usage.input_tokens > 0);

  const stream = await client.responses.create({
    model: MODEL,
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Stream me six tokens.' }] }],
    max_output_tokens: 6,
    stream: true,
  });
  let text = '';
  let deltas = 0;
  let last;
  for await (const event of stream) {
    if (event.type === 'response.output_text.delta') { deltas += 1; text += event.delta; }
    last = event;
  }
  assert.equal(deltas, 6);
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
  assert.equal(last.response.usage.output_tokens, 6);
  assert.equal(last.response.output[0].content[0].text, text);

  // Nothing is stored, so nothing can be continued: a clear 400, not a 500.
  await assert.rejects(
    client.responses.create({ model: MODEL, input: 'again', previous_response_id: r.id }),
    (e) => e instanceof OpenAI.BadRequestError && /previous_response_id/.test(e.message));
});

test('tool calls, whole and streamed, in chat and in the Responses API', async () => {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];
  const messages = [{ role: 'user', content: 'What is the weather? Use get_weather.' }];
  const r = await client.chat.completions.create({ model: MODEL, messages, tools });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  const call = r.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.ok(typeof JSON.parse(call.function.arguments).city === 'string');

  // The SDK's own stream helper puts the deltas back together.
  const runner = client.chat.completions.stream({ model: MODEL, messages, tools });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.tool_calls[0].function.arguments, call.function.arguments);

  // The tool's result goes back; the model answers in text.
  const followUp = await client.chat.completions.create({
    model: MODEL,
    tools,
    messages: [...messages, r.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21}' }],
    max_tokens: 5,
  });
  assert.equal(followUp.choices[0].finish_reason, 'length');
  assert.ok(followUp.choices[0].message.content.length > 0);

  const resp = await client.responses.create({
    model: MODEL,
    input: 'Use get_weather, please.',
    tools: [{ type: 'function', name: 'get_weather', parameters: tools[0].function.parameters }],
  });
  const fc = resp.output.find((o) => o.type === 'function_call');
  assert.ok(fc, JSON.stringify(resp.output));
  assert.equal(fc.name, 'get_weather');
  assert.ok(typeof JSON.parse(fc.arguments).city === 'string');
});

test('an audio transcription uploaded as the SDK does it', async () => {
  const audio = Buffer.alloc(48000, 7);  // what the simulator hears is only bytes
  const t = await client.audio.transcriptions.create({
    model: MODEL,
    file: await toFile(audio, 'speech.wav', { type: 'audio/wav' }),
  });
  assert.ok(t.text.length > 0, JSON.stringify(t));
  assert.equal(t.usage.type, 'tokens');
  assert.equal(t.usage.input_tokens, 75);  // 48,000 bytes at 640 a token
  const text = await client.audio.transcriptions.create({
    model: MODEL,
    file: await toFile(audio, 'speech.wav', { type: 'audio/wav' }),
    response_format: 'text',
  });
  assert.equal(text, t.text);
});

test('errors come back as the SDK expects them', async () => {
  const bad = new OpenAI({ baseURL: gatewayUrl + '/v1', apiKey: 'atr_nope', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await assert.rejects(
    client.chat.completions.create({ model: MODEL }),
    (e) => e instanceof OpenAI.BadRequestError);
});

test('every request is metered and the tenant can read its usage', async () => {
  const me = await (await fetch(apiUrl + '/api/v1/whoami', {
    headers: { authorization: 'Bearer ' + demoKey } })).json();
  const tenant = me.tenant?.id;
  assert.ok(tenant, JSON.stringify(me));
  let items = [];
  let refusals = [];
  const auth = { headers: { authorization: 'Bearer ' + demoKey } };
  const refused = () => refusals.reduce((n, r) => n + r.count, 0);
  for (let i = 0; i < 50; i += 1) {
    const r = await fetch(`${apiUrl}/api/v1/tenants/${tenant}/usage?limit=100`, auth);
    assert.equal(r.status, 200);
    items = (await r.json()).items;
    const f = await fetch(`${apiUrl}/api/v1/tenants/${tenant}/usage/refusals`, auth);
    assert.equal(f.status, 200);
    refusals = (await f.json()).items;
    if (items.length >= 5 && refused() >= 2) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  // 1 + 2 + 1 + 1 successful calls are records; the unknown model and the
  // missing messages were refused before any model server saw them, so they
  // are counted per key and reason instead of recorded one by one.
  assert.ok(items.length >= 5, `usage records: ${items.length}`);
  assert.ok(refused() >= 2, `refusals: ${JSON.stringify(refusals)}`);
  assert.ok(refusals.some((r) => r.reason === 'model_not_found'), JSON.stringify(refusals));
  const streamed = items.filter((u) => u.stream && u.status === 'completed');
  assert.ok(streamed.some((u) => u.output_tokens === 8));
  assert.ok(items.every((u) => u.tenant_id === tenant));
  assert.equal(new Set(items.map((u) => u.id)).size, items.length);
});

test('a key revoked in the control plane stops working at the gateway within 1 s', async () => {
  const auth = { authorization: 'Bearer ' + demoKey, 'content-type': 'application/json' };
  const me = await (await fetch(apiUrl + '/api/v1/whoami', { headers: auth })).json();
  const tenant = me.tenant.id;
  const created = await (await fetch(`${apiUrl}/api/v1/tenants/${tenant}/keys`, {
    method: 'POST', headers: auth, body: JSON.stringify({ name: 'short-lived' }) })).json();
  const key = new OpenAI({ baseURL: gatewayUrl + '/v1', apiKey: created.key, maxRetries: 0 });
  let ok = false;
  for (let i = 0; i < 40 && !ok; i += 1) {  // a new key also arrives by the policy poll
    try { await key.models.list(); ok = true; } catch { await new Promise((r) => setTimeout(r, 50)); }
  }
  assert.ok(ok, 'the new key works at the gateway');
  const revoked = await fetch(`${apiUrl}/api/v1/tenants/${tenant}/keys/${created.id}/revoke`, {
    method: 'POST', headers: auth });
  assert.equal(revoked.status, 200);
  const start = Date.now();
  let refusedAfter = -1;
  while (Date.now() - start < 3000) {
    try {
      await key.models.list();
    } catch (e) {
      if (e instanceof OpenAI.AuthenticationError) { refusedAfter = Date.now() - start; break; }
      throw e;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(refusedAfter >= 0 && refusedAfter < 1000, `refused after ${refusedAfter} ms`);
});

test('entitlement, limit and suspension changes reach the gateway within 1 s', async () => {
  const admin = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
  const me = await (await fetch(apiUrl + '/api/v1/whoami', {
    headers: { authorization: 'Bearer ' + demoKey } })).json();
  const tenant = me.tenant.id;
  const api = (method, path, body) => fetch(apiUrl + path, {
    method,
    headers: { authorization: 'Bearer ' + admin, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  // Makes the change, then calls the model until the answer's status is
  // `want`: how long that took (-1: not within 3 s).
  async function reaches(change, want) {
    const made = await change();
    assert.ok(made.ok, `${made.status} ${await made.text()}`);
    const start = Date.now();
    while (Date.now() - start < 3000) {
      let status = 200;
      try {
        await client.chat.completions.create({
          model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
      } catch (e) {
        if (!(e instanceof OpenAI.APIError)) throw e;
        status = e.status;
      }
      if (status === want) return Date.now() - start;
      await new Promise((r) => setTimeout(r, 20));
    }
    return -1;
  }
  const within = (ms, what) => assert.ok(ms >= 0 && ms < 1000, `${what}: ${ms} ms`);

  const entitlement = `/api/v1/tenants/${tenant}/entitlements/${MODEL}`;
  within(await reaches(() => api('DELETE', entitlement), 404), 'entitlement revoked');
  within(await reaches(() => api('PUT', entitlement), 200), 'entitlement granted again');

  const limits = `/api/v1/tenants/${tenant}/gateway-limits`;
  const before = (await (await api('GET', limits)).json()).items.find((l) => l.key_id === null);
  const { requests_per_minute, tokens_per_minute, max_concurrent, max_queued } = before;
  within(await reaches(() => api('PUT', limits, {
    requests_per_minute: 1, tokens_per_minute, max_concurrent, max_queued }), 429),
  'a requests-per-minute limit');
  within(await reaches(() => api('PUT', limits, {
    requests_per_minute, tokens_per_minute, max_concurrent, max_queued }), 200), 'the limit lifted');

  within(await reaches(() => api('POST', `/api/v1/tenants/${tenant}/suspend`), 401),
    'the tenant suspended');
  within(await reaches(() => api('POST', `/api/v1/tenants/${tenant}/resume`), 200),
    'the tenant resumed');
});

test('a tenant calls its LoRA adapter on its dedicated managed deployment on a MIG slice; no other tenant can', async () => {
  const admin = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
  const call = (token, method, path, body, type = 'application/json') => fetch(apiUrl + path, {
    method,
    headers: { authorization: 'Bearer ' + token, 'content-type': type },
    body: body === undefined ? undefined : (type === 'application/json' ? JSON.stringify(body) : body),
  });
  const ok = async (response) => {
    const text = await response.text();
    assert.ok(response.ok, `${response.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  const me = await ok(await call(demoKey, 'GET', '/api/v1/whoami'));
  const tenant = me.tenant.id;
  // The operator gives the tenant one MIG slice and a dedicated deployment
  // on it that allows adapters.
  await ok(await call(admin, 'PUT', `/api/v1/tenants/${tenant}/quotas`, {
    model: 'A100-80GB', kind: 'mig', guarantee_milli: 1000, limit_milli: 1000 }));
  const dep = await ok(await call(admin, 'POST', '/api/v1/deployments', {
    model: 'sim-tuned', region: 'local', tenant_id: tenant,
    serving: { template: 'engine-sim', replicas: 1, max_adapters: 4,
      resources: { kind: 'mig', model: 'A100-80GB', mig_profile: '3g.40gb' } } }));
  try {
    // The tenant uploads its adapter's folder and registers it, pinned by
    // the digest of what it uploaded.
    const dir = mkdtempSync(join(tmpdir(), 'atrium-lora-'));
    writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({ r: 8, lora_alpha: 16 }));
    writeFileSync(join(dir, 'adapter_model.safetensors'), 'not really weights');
    execFileSync('tar', ['-C', dir, '-cf', join(dir, 'lora.tar'),
      'adapter_config.json', 'adapter_model.safetensors']);
    const tar = readFileSync(join(dir, 'lora.tar'));
    rmSync(dir, { recursive: true, force: true });
    const archive = await ok(await call(demoKey, 'POST', '/api/v1/jobs/archives', tar,
      'application/x-tar'));
    const sha256 = createHash('sha256').update(tar).digest('hex');
    assert.equal(archive.sha256, sha256);
    const adapter = await ok(await call(demoKey, 'POST', `/api/v1/tenants/${tenant}/adapters`, {
      name: 'support', deployment: dep.id, artifact: 'archive:' + archive.id, sha256 }));
    assert.equal(adapter.model, 'sim-tuned:support');
    // Ready once the replica on the slice has loaded it.
    let status = adapter.status;
    for (let i = 0; i < 600 && status !== 'ready'; i += 1) {
      await new Promise((r) => setTimeout(r, 100));
      const now = await ok(await call(demoKey, 'GET', `/api/v1/tenants/${tenant}/adapters/${adapter.id}`));
      status = now.status;
      assert.notEqual(status, 'failed', now.detail);
    }
    assert.equal(status, 'ready');
    let listed = false;
    for (let i = 0; i < 40 && !listed; i += 1) {  // the gateway's policy poll
      listed = (await client.models.list()).data.some((m) => m.id === 'sim-tuned:support');
      if (!listed) await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(listed, 'the adapter is among the models the tenant may call');
    const chat = await client.chat.completions.create({
      model: 'sim-tuned:support', messages: [{ role: 'user', content: 'hello' }], max_tokens: 3 });
    assert.equal(chat.model, adapter.id, 'the engine answered as the adapter');
    assert.ok(chat.usage.completion_tokens > 0);
    const stream = await client.chat.completions.create({
      model: 'sim-tuned:support', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3,
      stream: true });
    let chunks = 0;
    for await (const chunk of stream) { chunks += chunk.choices.length; }
    assert.ok(chunks > 0);

    // Another tenant: neither the model nor the adapter exists for it.
    const bolt = await ok(await call(admin, 'POST', '/api/v1/tenants', { name: 'bolt-' + Date.now() }));
    const user = await ok(await call(admin, 'POST', `/api/v1/tenants/${bolt.id}/users`, {
      username: 'bob', role: 'tenant-admin', kind: 'service' }));
    const key = await ok(await call(admin, 'POST', `/api/v1/tenants/${bolt.id}/keys`, {
      name: 'bob', owner_user_id: user.id }));
    const other = new OpenAI({ baseURL: gatewayUrl + '/v1', apiKey: key.key, maxRetries: 0 });
    let refused = null;
    for (let i = 0; i < 40 && refused === null; i += 1) {  // the new key arrives by the poll
      try {
        await other.chat.completions.create({
          model: 'sim-tuned:support', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
        refused = 'served';
      } catch (e) {
        if (e instanceof OpenAI.NotFoundError) refused = e;
        else if (!(e instanceof OpenAI.AuthenticationError)) throw e;
        else await new Promise((r) => setTimeout(r, 50));
      }
    }
    assert.ok(refused instanceof OpenAI.NotFoundError, String(refused));
    assert.match(refused.message, /does not exist or you do not have access/);
  } finally {
    // Replicas outlive `atrium dev`: stop them before it stops.
    await ok(await call(admin, 'DELETE', `/api/v1/deployments/${dep.id}`));
    let live = 1;
    for (let i = 0; i < 300 && live > 0; i += 1) {
      const jobs = await ok(await call(admin, 'GET', `/api/v1/jobs?tenant_id=${tenant}&limit=100`));
      live = jobs.items.filter((j) => ['pending', 'starting', 'running'].includes(j.state)).length;
      if (live > 0) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(live, 0, 'the replica stopped with its deployment');
  }
});
