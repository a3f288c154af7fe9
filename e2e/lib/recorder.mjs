// A recording pass-through in front of the gateway, on 127.0.0.1: real
// clients talk to it as to the gateway, it forwards every request
// unchanged and streams every answer back as it comes, and keeps both, so a
// test can read what a client sent and what the gateway answered, byte for
// byte, streams included.

import http from 'node:http';

/**
 * @typedef {{method: string, path: string, request: string, status: number,
 *   headers: Record<string, string|string[]>, contentType: string, body: string}} Exchange
 */

/**
 * Starts the recorder in front of target (http://127.0.0.1:PORT).
 * onExchange, when given, is called with each exchange once its answer has
 * ended.
 *
 * @param {string} target
 * @param {{onExchange?: (e: Exchange) => void}} [options]
 * @returns {Promise<{root: string, exchanges: Exchange[], idle: (ms?: number) => Promise<void>, stop: () => Promise<void>}>}
 */
export async function startRecorder(target, { onExchange } = {}) {
  const exchanges = [];
  // Exchanges still under way, and who waits for there to be none: a
  // client that leaves mid-answer (an SDK that throws on an error event)
  // returns before the gateway's answer ended here.
  let inflight = 0;
  let waiters = [];
  const done = () => {
    inflight--;
    if (inflight === 0) {
      for (const w of waiters) w();
      waiters = [];
    }
  };
  const server = http.createServer((req, res) => {
    inflight++;
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const request = Buffer.concat(chunks);
      const headers = { ...req.headers, host: new URL(target).host };
      const out = http.request(`${target}${req.url}`, { method: req.method, headers }, (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        const body = [];
        up.on('data', (c) => {
          body.push(c);
          res.write(c);
        });
        up.on('end', () => {
          const exchange = {
            method: req.method,
            path: req.url,
            request: request.toString('utf8'),
            status: up.statusCode,
            headers: up.headers,
            contentType: up.headers['content-type'] ?? '',
            body: Buffer.concat(body).toString('utf8'),
          };
          exchanges.push(exchange);
          onExchange?.(exchange);
          res.end();
          done();
        });
        up.on('error', () => {
          res.destroy();
          done();
        });
      });
      out.on('error', (err) => {
        res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`recorder: ${err.message}`);
        done();
      });
      out.end(request);
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  return {
    root: `http://127.0.0.1:${port}`,
    exchanges,
    /** Resolves once no exchange is under way, or after ms regardless. */
    idle(ms = 10_000) {
      if (inflight === 0) return Promise.resolve();
      return new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
    async stop() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * The events of a text/event-stream body: {event, data, raw} each, data
 * parsed as JSON when it is JSON ("[DONE]" and comments are kept as text).
 */
export function sseEvents(body) {
  const events = [];
  for (const block of body.split(/\r?\n\r?\n/)) {
    if (block.trim() === '') continue;
    let event;
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'event') event = value;
      if (field === 'data') data.push(value);
    }
    if (event === undefined && data.length === 0) continue;
    const text = data.join('\n');
    let parsed = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: kept as text for the caller to judge
    }
    events.push({ event, data: parsed, raw: block });
  }
  return events;
}
