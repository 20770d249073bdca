#!/bin/bash
touch /app/flag
