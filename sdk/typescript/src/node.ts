/**
 * Node's storage: one device per directory (0700), each value a file (0600) written atomically and durably (a
 * temporary file fsynced, then renamed over the old one), so a crash leaves the old value or the new, never half.
 * Its `device.json` and `ledger.json` are in the Python SDK's formats.
 */

import type { DeviceStorage } from "./storage.js";

function fileOf(key: string): string {
  // a collection's outbox, or a training job's (outbox/job-JOB) and its last update's version (training-JOB)
  if (!/^(device|ledger|outbox\/[a-z][a-z0-9_-]{0,67}|training-[a-z0-9][a-z0-9_-]{0,63})$/.test(key)) throw new Error(`not a storage key: ${key}`);
  return `${key}.json`;
}

export function directoryStorage(directory: string): DeviceStorage {
  const made = import("node:fs/promises").then(async (fs) => {
    await fs.mkdir(`${directory}/outbox`, { recursive: true, mode: 0o700 });
    return fs;
  });
  return {
    async get(key) {
      const fs = await made;
      try {
        return await fs.readFile(`${directory}/${fileOf(key)}`, "utf8");
      } catch (exc) {
        if ((exc as { code?: string }).code === "ENOENT") return undefined;
        throw exc;
      }
    },
    async set(key, value) {
      const fs = await made;
      const path = `${directory}/${fileOf(key)}`;
      const tmp = `${path}.tmp`;
      const handle = await fs.open(tmp, "w", 0o600);
      try {
        await handle.writeFile(value, "utf8");
        await handle.sync();
      } catch (exc) {
        await handle.close();
        await fs.rm(tmp, { force: true });
        throw exc;
      }
      await handle.close();
      await fs.rename(tmp, path);
    },
  };
}
