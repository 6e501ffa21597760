#!/usr/bin/env node
// Loopback S3 for mltrain's tests: s3rver (a real S3-API server; it does not check SigV4
// signatures) behind a proxy that verifies every request's AWS SigV4 signature with the
// independent `aws4` signer and the payload hash against x-amz-content-sha256.
//
// Usage: node s3-test-server.js <data-dir> <bucket> [access-key] [secret-key] [region]
// Prints "READY <port>" on stdout once both listen. Requests that fail verification get HTTP 403
// (SignatureDoesNotMatch / XAmzContentSHA256Mismatch) and a line on stderr.
'use strict';
const http = require('http');
const crypto = require('crypto');
const aws4 = require('aws4');
const S3rver = require('s3rver');

const [dataDir, bucket, accessKeyId = 'S3RVER', secretAccessKey = 'S3RVER', region = 'us-east-1'] = process.argv.slice(2);
if (!dataDir || !bucket) {
  console.error('usage: s3-test-server.js <data-dir> <bucket> [access-key] [secret-key] [region]');
  process.exit(2);
}

function reject(res, code, message) {
  console.error(`sigv4-proxy: rejected: ${code}: ${message}`);
  res.writeHead(403, { 'Content-Type': 'application/xml' });
  res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message></Error>`);
}

// Returns an error string, or null when the request's signature is what aws4 computes.
function verify(req, body) {
  const auth = req.headers['authorization'] || '';
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, ?SignedHeaders=([^,]+), ?Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) return `malformed Authorization header: ${auth}`;
  const [, keyId, , credRegion, signedHeaders, signature] = m;
  if (keyId !== accessKeyId) return `unknown access key ${keyId}`;
  if (credRegion !== region) return `credential scope region ${credRegion} != ${region}`;
  const payloadHash = req.headers['x-amz-content-sha256'];
  if (!payloadHash) return 'missing x-amz-content-sha256';
  const actual = crypto.createHash('sha256').update(body).digest('hex');
  if (payloadHash !== 'UNSIGNED-PAYLOAD' && payloadHash !== actual) return `x-amz-content-sha256 ${payloadHash} != sha256(body) ${actual}`;
  const headers = {};
  for (const name of signedHeaders.split(';')) {
    if (req.headers[name] === undefined) return `signed header ${name} is missing`;
    headers[name] = req.headers[name];
  }
  const opts = { host: req.headers.host, method: req.method, path: req.url, service: 's3', region, headers };
  aws4.sign(opts, { accessKeyId, secretAccessKey });
  const expected = /Signature=([0-9a-f]{64})/.exec(opts.headers.Authorization)[1];
  if (expected !== signature) {
    const signer = new aws4.RequestSigner(opts, { accessKeyId, secretAccessKey });
    return `signature mismatch; aws4's canonical request:\n${signer.canonicalString()}`;
  }
  return null;
}

async function main() {
  const s3 = new S3rver({ port: 0, address: '127.0.0.1', directory: dataDir, silent: true, configureBuckets: [{ name: bucket }] });
  const { port: upstreamPort } = await s3.run();
  const proxy = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const error = verify(req, body);
      if (error) return reject(res, error.startsWith('x-amz-content') ? 'XAmzContentSHA256Mismatch' : 'SignatureDoesNotMatch', error);
      const up = http.request({ host: '127.0.0.1', port: upstreamPort, method: req.method, path: req.url, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
      up.end(body);
    });
  });
  proxy.listen(0, '127.0.0.1', () => {
    process.stdout.write(`READY ${proxy.address().port}\n`);
  });
  const stop = () => { proxy.close(); s3.close().finally(() => process.exit(0)); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((e) => { console.error(e); process.exit(1); });
