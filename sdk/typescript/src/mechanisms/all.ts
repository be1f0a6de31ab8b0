/** Every mechanism registered at once, statically (tools, tests, and apps that would rather not load on demand). */

import * as distribution from "./distribution.js";
import * as factorization from "./factorization.js";
import * as keyvalue from "./keyvalue.js";
import * as longitudinal from "./longitudinal.js";
import { modules } from "./optional.js";
import * as strings from "./strings.js";

Object.assign(modules, { distribution, factorization, keyvalue, longitudinal, strings });
