'use strict';
// @opentinker/client: the OpenTinker Scheduler API for Node.js.

const { OpenTinkerClient, TERMINAL_STATES, stateName } = require('./client');
const { OpenTinkerError, SpecError } = require('./errors');
const { jobSpecFromObject, readSpecFile } = require('./spec');
const { resolveApiKey } = require('./credentials');

module.exports = { OpenTinkerClient, OpenTinkerError, SpecError, TERMINAL_STATES, stateName, jobSpecFromObject,
                   readSpecFile, resolveApiKey };
