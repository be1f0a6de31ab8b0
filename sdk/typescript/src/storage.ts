/**
 * Where a device keeps its state between runs. The SDK stores a few text values by key ("device": its credentials,
 * pointers, signed specs and verdicts; "ledger": its privacy ledger; "outbox/NAME": the reports not sent yet), through
 * this small get/set interface, which an app may implement itself (a React Native store, an Electron file...):
 *
 *     interface DeviceStorage { get(key): string | undefined | Promise<...>; set(key, value): void | Promise<void> }
 *
 * `set` must be durable when it resolves, and must throw (or reject) when it cannot keep the value (a full disk or
 * quota): the SDK then charges nothing and makes no report. Built in: `indexedDbStorage` (the browser default),
 * `directoryStorage` (Node, in `@ldpstream/device/node`; a directory path given to `Device.join` means it) and
 * `memoryStorage` (nothing survives the process: for tests).
 */

export interface DeviceStorage {
  get(key: string): Promise<string | undefined | null> | string | undefined | null;
  set(key: string, value: string): Promise<void> | void;
}

/** Nothing survives the process. */
export function memoryStorage(initial: Record<string, string> = {}): DeviceStorage & { data: Map<string, string> } {
  const data = new Map(Object.entries(initial));
  return {
    data,
    get: (key) => data.get(key),
    set: (key, value) => {
      data.set(key, value);
    },
  };
}

function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

/** The browser's IndexedDB, one database per device (`name`), one object store of text values. */
export function indexedDbStorage(name = "ldpstream-device"): DeviceStorage {
  let opened: Promise<IDBDatabase> | null = null;
  const db = (): Promise<IDBDatabase> => {
    if (opened === null) {
      const idb = (globalThis as { indexedDB?: IDBFactory }).indexedDB;
      if (idb === undefined) return Promise.reject(new Error("this platform has no IndexedDB: pass `storage`"));
      const open = idb.open(name, 1);
      open.onupgradeneeded = () => open.result.createObjectStore("state");
      opened = request(open);
      opened.catch(() => {
        opened = null;
      });
    }
    return opened;
  };
  return {
    async get(key) {
      const tx = (await db()).transaction("state", "readonly");
      return (await request(tx.objectStore("state").get(key))) as string | undefined;
    },
    async set(key, value) {
      const tx = (await db()).transaction("state", "readwrite", { durability: "strict" });
      tx.objectStore("state").put(value, key);
      await new Promise<void>((resolve, reject) => {
        tx.oncomplete = () => resolve();
        tx.onerror = () => reject(tx.error);
        tx.onabort = () => reject(tx.error ?? new Error("the IndexedDB write was aborted (quota?)"));
      });
    },
  };
}
