// The checks of memo.json, collectors.json and hashes.json: the deterministic parts of perturbation, bit for bit.
import "../dist/mechanisms/all.js"; // every mechanism, statically
import assert from "node:assert/strict";

import { fromBase64 } from "../dist/bytes.js";
import { Collector, hashSeed } from "../dist/collector.js";
import { nameKey } from "../dist/hashes.js";
import { FactorizationMechanism } from "../dist/mechanisms/factorization.js";
import { hadamardBit, hashBucket, otherSupportProbability } from "../dist/mechanisms/frequency.js";
import { keyCode } from "../dist/mechanisms/keyvalue.js";
import { keyedBits, makeLongitudinal, memoPrefixes } from "../dist/mechanisms/longitudinal.js";
import { duchiBound } from "../dist/mechanisms/numeric.js";
import { bucket, hashSalts, HCMSTree, PEM, prefixFingerprint, SFP, StringDomain } from "../dist/mechanisms/strings.js";
import { parseSpec } from "../dist/spec.js";
import { attributeSecret, keyedUniform, keyedWord, mix64 } from "../dist/u64.js";

/** Floats a libm computes (exp, log, tanh) may differ by an ulp or so between platforms. */
export function close(got, want, what, rtol = 1e-12) {
  if (want === null || got === null) return assert.equal(got, want, what);
  assert.ok(Math.abs(got - want) <= rtol * Math.abs(want) + 1e-300, `${what}: ${got} vs ${want}`);
}

const big = (list) => list.map((s) => BigInt(s));

export async function checkMemoCase(c) {
  switch (c.kind) {
    case "mix64":
      assert.deepEqual(big(c.inputs).map(mix64).map(String), c.outputs);
      return;
    case "keyed_words": {
      const keys = big(c.keys);
      assert.deepEqual(big(c.secrets).map((s) => String(keyedWord(s, BigInt(c.tag), ...keys))), c.words);
      assert.deepEqual(big(c.secrets).map((s) => keyedUniform(s, BigInt(c.tag), ...keys)), c.uniforms);
      return;
    }
    case "attribute_secret":
      assert.equal(String(nameKey(c.attribute)), c.name_key);
      assert.deepEqual(big(c.secrets).map((s) => String(attributeSecret(s, nameKey(c.attribute)))), c.attribute_secrets);
      return;
    case "keyed_bits":
      big(c.secrets).forEach((s, i) => {
        const { bits, tail } = keyedBits(s, c.codes[i], c.width, c.prob, 2);
        assert.deepEqual([...bits], c.bits[i]);
        assert.deepEqual(tail, c.tail[i]);
      });
      return;
    case "longitudinal": {
      const mech = makeLongitudinal(c.mechanism, c.lifetime, c.first, c.domain, c.parameters);
      assert.equal(mech.repr(), c.repr);
      assert.deepEqual(memoPrefixes("battery", mech), [c.memo_prefix, `battery/${c.repr}/`]);
      close(mech.epsilon, c.epsilon, "epsilon");
      close(mech.epsilonLifetime, c.epsilon_lifetime, "epsilon_lifetime");
      for (const [k, v] of Object.entries(c.mechanism_parameters)) close(mech.parameters()[k], v, k);
      big(c.secrets).forEach((secret, i) => {
        const value = c.values[i];
        const key = mech.memoKey(value, secret);
        assert.equal(key, c.memo_keys[i], `memo key of ${value}`);
        if (c.mechanism === "l-grr") assert.equal(mech.permanent(value, secret), c.permanent[i]);
        else if (c.mechanism === "rappor") {
          const prr = mech.permanent(value, secret);
          assert.equal(prr.cohort, c.cohorts[i]);
          assert.deepEqual([...prr.bits], c.permanent[i]);
        } else if (c.mechanism === "1bitmean") {
          assert.equal(mech.permanent(key, secret) ? 1 : 0, c.permanent[i]);
          close(mech.bound, c.bound, "bound");
        } else if (c.mechanism === "dbitflip") {
          const prr = mech.permanent(value, secret);
          assert.deepEqual(prr.buckets, c.buckets[i]);
          assert.deepEqual(prr.bits, c.permanent[i]);
        } else assert.deepEqual([...mech.permanent(value, secret)], c.permanent[i]);
      });
      if (c.mechanism === "rappor") {
        c.positions.forEach((byValue, cohort) => byValue.forEach((p, v) => assert.deepEqual(mech.positions(cohort, v), p)));
      }
      return;
    }
    default:
      assert.fail(`unknown kind ${c.kind}`);
  }
}

export async function checkCollectorCase(c) {
  const spec = parseSpec(c.spec);
  const collector = new Collector(spec);
  assert.equal(collector.k, c.k);
  assert.deepEqual(collector.resolved(), c.mechanisms);
  const budgets = collector.privacyBudgets();
  assert.equal(budgets.per_report, c.budgets.per_report);
  assert.equal(budgets.lifetime, c.budgets.lifetime);
  assert.equal(budgets.values, c.budgets.values);
  for (const [name, want] of Object.entries(c.budgets.attributes)) {
    const got = budgets.attributes[name];
    assert.equal(got.mechanism, want.mechanism);
    close(got.one_report, want.one_report, `${name} one_report`);
    close(got.per_value, want.per_value, `${name} per_value`);
  }
  if (c.memos !== undefined) {
    let i = 0;
    for (const secret of big(c.secrets)) {
      for (const record of c.records) {
        const memos = collector.memos(record, secret);
        assert.deepEqual(memos.map((m) => m.key), c.memos[i]);
        assert.deepEqual(memos.map((m) => m.legacy), c.legacy_memos[i++]);
      }
    }
  }
}

export async function checkHashCase(c) {
  switch (c.kind) {
    case "local_hash":
      c.a.forEach((a, i) => assert.equal(hashBucket(a, c.b[i], c.codes[i], c.g), c.buckets[i]));
      return;
    case "other_support":
      assert.equal(otherSupportProbability(c.keep, c.g), c.q);
      return;
    case "hadamard":
      c.rows.forEach((r, i) => assert.equal(hadamardBit(r, c.codes[i]), c.bits[i]));
      return;
    case "strings": {
      const domain = new StringDomain(c.max_length);
      const seed = BigInt(c.seed);
      const salts = hashSalts(seed, 4);
      assert.deepEqual(salts.map(String), c.salts);
      c.strings.forEach((s, i) => {
        const print = prefixFingerprint(domain.encode(s), c.length, seed);
        assert.equal(String(print), c.fingerprints[i]);
        assert.deepEqual(salts.map((salt) => bucket(print, salt, [2, 256, 1024, 56, 7][i])), c.buckets[i]);
      });
      return;
    }
    case "hash_seed":
      assert.equal(String(hashSeed(c.collection, c.attribute)), c.seed);
      return;
    case "tree": {
      const Tree = c.tree === "pem" ? PEM : HCMSTree;
      const tree = new Tree(c.epsilon, new StringDomain(c.max_length, c.alphabet), BigInt(c.seed), c.top);
      assert.deepEqual(tree.lengths, c.lengths);
      assert.deepEqual(tree.oracles.map((o) => String(o.seed)), c.oracle_seeds);
      assert.deepEqual(tree.oracles.map((o) => o.width), c.widths);
      assert.deepEqual(tree.oracles.map((o) => o.hashes), c.hashes);
      return;
    }
    case "sfp": {
      const domain = new StringDomain(c.max_length, c.alphabet);
      const sfp = new SFP(c.epsilon, domain, BigInt(c.seed), 3);
      assert.deepEqual(sfp.positions, c.positions);
      assert.deepEqual(sfp.fragments.map((f) => String(f.seed)), c.fragment_seeds);
      assert.equal(String(sfp.word.seed), c.word_seed);
      assert.equal(sfp.word.width, c.width);
      assert.equal(sfp.word.hashes, c.hashes);
      c.strings.forEach((s, i) => {
        const row = domain.encode(s);
        assert.equal(sfp.piece(row), c.pieces[i]);
        c.positions.forEach((_, t) => assert.deepEqual([...sfp.record(row, t)], c.records[t][0][i]));
      });
      return;
    }
    case "key_codes": {
      const attribute = { name: c.attribute, type: "keyvalue", keys: null, buckets: c.buckets };
      assert.deepEqual(c.keys.map((k) => keyCode(attribute, k)), c.codes);
      return;
    }
    case "duchi_bound":
      close(duchiBound(c.epsilon), c.bound, "Duchi's bound", 1e-15);
      return;
    case "strategy": {
      const mech = await FactorizationMechanism.fromNpz(fromBase64(c.npz), c.hash);
      assert.equal(mech.hash, c.hash);
      assert.equal(mech.outputs, c.outputs);
      assert.equal(mech.types, c.types);
      await assert.rejects(FactorizationMechanism.fromNpz(fromBase64(c.tampered), c.hash), /SpecError|strategy/);
      await assert.rejects(FactorizationMechanism.fromNpz(fromBase64(c.npz), "0".repeat(64)), /pinned hash/);
      return;
    }
    default:
      assert.fail(`unknown kind ${c.kind}`);
  }
}
